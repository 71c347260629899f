"""What a plugin folder defines, as plain data: agents, skills, and the plugin itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmdeck.plugins.formats import CronSpec

# Tiers in the order they load; on a name collision the later wins.
TIERS = ("system", "mgmt", "user", "project", "given")
# The tiers whose skills every session is offered; a packaged plugin's other skills (mgmt's)
# are offered only to its own agents.
SHARED_SKILL_TIERS = frozenset({"system", "user", "project", "given"})


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a plugin file, named by file and field."""

    path: Path
    field: str | None
    message: str
    level: str = "error"  # "error" fails validation; "warning" is shown only

    def line(self) -> str:
        """The problem as one line: `file: field 'x': message`."""
        where = f"field '{self.field}': " if self.field else ""
        return f"{self.path}: {where}{self.message}"


@dataclass(frozen=True)
class Definition:
    """What every agent and skill file has: read from the same front matter and body."""

    name: str
    description: str
    body: str
    path: Path
    plugin: str
    tier: str


@dataclass(frozen=True)
class AgentDef(Definition):
    """A named agent: its front matter and its prompt (the body)."""

    title: str | None = None
    system: bool = False
    id: str | None = None
    parent: str | None = None
    tools: list[str] | None = None
    skills: list[str] = field(default_factory=list)
    initial_prompt: str | None = None
    splash: str | None = None
    model: str | None = None
    cron: CronSpec | None = None
    mcp_servers: list[str] | None = None
    compact_at: float | None = None
    core_tools: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def agent_id(self) -> str:
        """The id a system agent runs under (its `id`, else its name)."""
        return self.id or self.name


@dataclass(frozen=True)
class SkillDef(Definition):
    """A skill: a body the model loads on demand, and the tools it brings."""

    tools: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plugin:
    """One plugin folder as loaded."""

    name: str
    path: Path
    tier: str
    version: str | None = None
    description: str = ""
    agents: list[AgentDef] = field(default_factory=list)
    skills: list[SkillDef] = field(default_factory=list)
    # `.mcp.json` as data: the MCP bridge interprets it, the loader only keeps it.
    mcp: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
