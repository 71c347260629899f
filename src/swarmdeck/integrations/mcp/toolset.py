"""MCP servers as a session's tools: the servers a session is granted, started once per
process and shared, their tools named SERVER__TOOL with the effect class their entry
declares (default `once`), offered only in the modes that class allows."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from swarmdeck.errors import ConfigError
from swarmdeck.integrations.mcp.config import McpServer, McpServers, collect_servers
from swarmdeck.integrations.mcp.connection import (
    ListedTool,
    McpStartError,
    SecretLookup,
    ServerConnection,
    finish_cleanups,
    server_cwd,
)
from swarmdeck.integrations.mcp.sdk import INSTALL_HINT, sdk_available
from swarmdeck.tools.base import ALL_MODES, WRITE_MODES, Effect, Tool, ToolContext, ToolOutcome
from swarmdeck.tools.lean_schema import lean_schema
from swarmdeck.tools.toolsets import SessionScope, ToolsetTools

SEPARATOR = "__"
# What every vendor accepts in a tool name.
NAME_MAX = 64
UNSAFE_NAME_RE = re.compile(r"[^A-Za-z0-9_-]")
DESCRIPTION_MAX = 1024
RESULT_MAX_CHARS = 100_000
# The servers of a workdir are read again after this long (as plugin folders are).
SERVERS_CACHE_SECONDS = 10.0
GRANT_OPTION = "mcp_servers"


class McpArguments(BaseModel):
    """An MCP tool's arguments, kept as the model sent them: the server validates them
    against the schema it published."""

    model_config = ConfigDict(extra="allow")


def tool_name(server: str, tool: str) -> str:
    """The name a session sees: SERVER__TOOL, with what vendors refuse replaced by `_`."""
    return UNSAFE_NAME_RE.sub("_", f"{server}{SEPARATOR}{tool}")[:NAME_MAX]


def render_result(result: Any) -> str:
    """A CallToolResult as the text the model reads (binary parts described, not inlined)."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.name}: {block.uri}]")
        elif kind == "resource":
            inner = block.resource
            text = getattr(inner, "text", None)
            parts.append(text if text is not None else f"[resource {inner.uri}, binary, not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > RESULT_MAX_CHARS:
        text = text[:RESULT_MAX_CHARS] + f"\n[… cut at {RESULT_MAX_CHARS} characters]"
    return text


class McpPool:
    """The MCP servers this process runs, one per declaration, shared by its sessions."""

    def __init__(self, lookup: SecretLookup, log_dir: Path | None) -> None:
        self.lookup = lookup
        self.log_dir = log_dir
        self._connections: dict[str, ServerConnection] = {}

    def connection(self, server: McpServer, workdir: Path) -> ServerConnection:
        """The process's connection to this server for sessions in `workdir` (not started
        until used): a stdio server runs in the workdir, so each workdir has its own."""
        cwd = server_cwd(server, workdir)
        key = f"{server.identity()}\0{cwd or ''}"
        conn = self._connections.get(key)
        if conn is None:
            conn = ServerConnection(server, self.lookup, self.log_dir, cwd)
            self._connections[key] = conn
        return conn

    async def close(self) -> None:
        """Stop every server this process started."""
        for conn in list(self._connections.values()):
            await conn.close()
        self._connections.clear()
        await finish_cleanups()


class McpToolset:
    """The SessionToolset of MCP servers."""

    def __init__(self, pool: McpPool) -> None:
        self.pool = pool
        self._servers: dict[tuple[str, tuple[str, ...]], tuple[float, McpServers]] = {}
        # Tools built for a connection's current start (rebuilt when it restarts).
        self._built: dict[int, tuple[int, list[Tool], list[str]]] = {}

    def servers(self, scope: SessionScope) -> McpServers:
        """Every server declared for the scope's workdir and plugins (cached briefly)."""
        key = (str(scope.workdir), tuple(f"{p.tier}:{p.path}" for p in scope.plugins))
        now = time.monotonic()
        cached = self._servers.get(key)
        if cached is not None and now - cached[0] < SERVERS_CACHE_SECONDS:
            return cached[1]
        found = collect_servers(scope.plugins, scope.workdir)
        self._servers[key] = (now, found)
        return found

    def granted(self, scope: SessionScope) -> tuple[list[McpServer], list[str]]:
        """The servers this session gets, and one line per server it names that it cannot."""
        declared = self.servers(scope)
        servers, missing = declared.granted(scope.options.get(GRANT_OPTION))
        lines = []
        for name in missing:
            why = "; ".join(p.line() for p in declared.problems_of(name))
            lines.append(f"MCP server {name}: " + (why or "no .mcp.json declares it"))
        return servers, lines

    def preflight(self, scope: SessionScope) -> None:
        """Refuse a session granted servers when the SDK is missing (fail closed)."""
        servers, _ = self.granted(scope)
        if servers and not sdk_available():
            names = ", ".join(s.name for s in servers)
            raise ConfigError(
                f"MCP servers are configured for this session ({names}) but the MCP SDK is "
                "not installed",
                INSTALL_HINT,
            )

    async def tools_for(self, scope: SessionScope) -> ToolsetTools:
        """The tools of the session's servers, started lazily; a server that cannot start
        is left out and reported once."""
        servers, missing = self.granted(scope)
        out = ToolsetTools(notices=[(f"mcp:missing:{line}", line) for line in missing])
        if not servers:
            return out
        self.preflight(scope)
        conns = [self.pool.connection(server, scope.workdir) for server in servers]
        # All at once: a session waits for its slowest server, not for the sum of them.
        async with asyncio.TaskGroup() as group:
            listings = [group.create_task(_listing(conn)) for conn in conns]
        by_name: dict[str, list[Tool]] = {}
        for conn, listing in zip(conns, listings, strict=True):
            listed = listing.result()
            if isinstance(listed, McpStartError):
                out.notices.append((f"mcp:{conn.name}:{conn.failures}", str(listed)))
                continue
            tools, problems = self.tools_of(conn, listed)
            out.notices += [(f"mcp:{conn.name}:{conn.starts}:{p}", p) for p in problems]
            for tool in tools:
                by_name.setdefault(tool.name, []).append(tool)
        for name, same in by_name.items():
            if len(same) > 1:
                out.notices.append(
                    (
                        f"mcp:ambiguous:{name}",
                        f"error: MCP tool name {name} is ambiguous ({len(same)} tools of "
                        "granted servers map to it); none of them is offered",
                    )
                )
                continue
            if same[0].offered_to(scope.mode):
                out.tools.append(same[0])
        return out

    def tools_of(
        self, conn: ServerConnection, listed: list[ListedTool]
    ) -> tuple[list[Tool], list[str]]:
        """The swarmdeck tools of a connection's listing (built once per start)."""
        cached = self._built.get(id(conn))
        if cached is not None and cached[0] == conn.starts:
            return cached[1], cached[2]
        tools: list[Tool] = []
        problems: list[str] = []
        names: dict[str, str] = {}
        for item in listed:
            name = tool_name(conn.name, item.name)
            if name in names:
                problems.append(
                    f"error: MCP server {conn.name}: tools {names[name]!r} and {item.name!r} "
                    f"both map to {name}; neither is offered"
                )
                tools = [t for t in tools if t.name != name]
                continue
            names[name] = item.name
            tools.append(_mcp_tool(conn, item, name))
        self._built[id(conn)] = (conn.starts, tools, problems)
        return tools, problems

    async def close(self) -> None:
        """Stop this process's servers."""
        await self.pool.close()


async def _listing(conn: ServerConnection) -> list[ListedTool] | McpStartError:
    """The server's tools, or why it could not start (kept per server)."""
    try:
        return await conn.tools()
    except McpStartError as exc:
        return exc


def _mcp_tool(conn: ServerConnection, item: ListedTool, name: str) -> Tool:
    entry = conn.server.entry
    effect = Effect(entry.effect_of(item.name))
    remote = item.name

    async def body(_ctx: ToolContext, args: McpArguments) -> ToolOutcome:
        result = await conn.call(remote, args.model_dump(), entry.call_timeout)
        return ToolOutcome(render_result(result), is_error=bool(result.is_error))

    schema = dict(item.input_schema) or {"type": "object", "properties": {}}
    schema.setdefault("type", "object")
    description = (item.description or f"{remote} (MCP server {conn.name})")[:DESCRIPTION_MAX]
    return Tool(
        name=name,
        description=description,
        args_model=McpArguments,
        effect=effect,
        body=body,
        # Read-only modes get only the tools declared `read`.
        modes=ALL_MODES if effect is Effect.READ else WRITE_MODES,
        schema=lean_schema(schema),
        eager=entry.eager,
        group=conn.name,
    )
