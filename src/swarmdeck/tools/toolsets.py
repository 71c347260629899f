"""Per-session toolsets: tools that come from outside the registry (an MCP server's), found
when a session's turn is prepared rather than registered once per process."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from swarmdeck.plugins.definitions import Plugin
from swarmdeck.tools.base import Tool


@dataclass(frozen=True)
class SessionScope:
    """What a toolset may know of the session it serves."""

    session_id: str
    mode: str
    workdir: Path
    options: dict[str, Any]
    plugins: tuple[Plugin, ...] = ()


@dataclass
class ToolsetTools:
    """A toolset's tools for one turn, and what the session should be told about it (a
    server that did not start), as (idempotency key, one line) pairs."""

    tools: list[Tool] = field(default_factory=list)
    notices: list[tuple[str, str]] = field(default_factory=list)


class SessionToolset(Protocol):
    """A source of tools per session."""

    def preflight(self, scope: SessionScope) -> None:
        """Refuse (a typed error with its fix) a session this toolset could not serve."""
        ...

    async def tools_for(self, scope: SessionScope) -> ToolsetTools:
        """The tools this session is offered now (only those its mode may use)."""
        ...

    async def close(self) -> None:
        """Release what the toolset started (this process is stopping)."""
        ...
