"""A real MCP server with fifteen tools of the shapes MCP servers publish (lookups, searches,
records with several fields), for bench/tools.py: `python bench/mcp_wide_server.py NAME`."""

from __future__ import annotations

import sys
from typing import Annotated

from pydantic import Field

TOPICS = ("issue", "page", "ticket", "build", "invoice")


def search(
    query: Annotated[str, Field(description="Words to look for, in any order.")],
    limit: Annotated[int, Field(description="How many results at most.", ge=1, le=100)] = 10,
    cursor: Annotated[str | None, Field(description="Where the previous page ended.")] = None,
) -> str:
    """placeholder"""
    return f"{query}: nothing found"


def get(
    item_id: Annotated[str, Field(description="The identifier the search returned.")],
    fields: Annotated[
        list[str] | None, Field(description="Only these fields (default: all of them).")
    ] = None,
) -> str:
    """placeholder"""
    return f"{item_id}: not found"


def update(
    item_id: Annotated[str, Field(description="The identifier of the record to change.")],
    title: Annotated[str | None, Field(description="A new title, if it changes.")] = None,
    body: Annotated[str | None, Field(description="The new text, in Markdown.")] = None,
    labels: Annotated[
        list[str] | None, Field(description="Labels to set, replacing the old.")
    ] = None,
    assignee: Annotated[str | None, Field(description="Who takes it over, by user name.")] = None,
) -> str:
    """placeholder"""
    return f"{item_id}: updated"


def build(name: str):
    """The server: for each topic, a search, a lookup and an update."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(name, log_level="WARNING")
    for topic in TOPICS:
        server.add_tool(
            search, name=f"search_{topic}s",
            description=f"Search the {topic}s of {name} by words; returns ids and titles, newest first.",
        )  # fmt: skip
        server.add_tool(
            get, name=f"get_{topic}",
            description=f"Fetch one {topic} of {name} by id, with its fields and history.",
        )  # fmt: skip
        server.add_tool(
            update, name=f"update_{topic}",
            description=f"Change a {topic} of {name}: its title, text, labels or assignee.",
        )  # fmt: skip
    return server


if __name__ == "__main__":
    build(sys.argv[1]).run()
