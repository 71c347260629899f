"""`.mcp.json` files as data: which MCP servers exist, where each was declared, how to start
it, the effect class of its tools, its timeouts and whether sessions get it by default.

The format is Claude Code's and PilotSwarm's (`{"mcpServers": {NAME: {command, args, env,
cwd} | {url, headers}}}`), with swarmdeck's keys beside them: `effect` (the class of every
tool of the server, default `once`), `effects` (per tool), `default` (offered to sessions
that name no servers), `startupTimeout` and `callTimeout` (seconds).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from swarmdeck.plugins.definitions import Plugin, Problem

MCP_FILE = ".mcp.json"
DEFAULT_STARTUP_TIMEOUT_S = 20.0
DEFAULT_CALL_TIMEOUT_S = 120.0
# A server's name is the first half of its tools' names (SERVER__TOOL): no "__" inside it,
# so the split is never ambiguous, and only characters every vendor accepts in a tool name.
SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]|_(?!_))*$")
KEY_REF_RE = re.compile(r"\$\{key:([^}]*)\}")
EffectName = Literal["read", "idempotent", "once"]


class ServerEntry(BaseModel):
    """One entry of `mcpServers`."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: Literal["stdio", "http", "streamable-http", "streamable_http"] | None = None
    command: str | None = Field(None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = Field(None, min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    effect: EffectName = "once"
    effects: dict[str, EffectName] = Field(default_factory=dict)
    default: bool = False
    # Its tools' schemas go whole into every prompt; else they are indexed until loaded.
    eager: bool = False
    startup_timeout: float = Field(DEFAULT_STARTUP_TIMEOUT_S, gt=0, alias="startupTimeout")
    call_timeout: float = Field(DEFAULT_CALL_TIMEOUT_S, gt=0, alias="callTimeout")

    @model_validator(mode="after")
    def _one_transport(self) -> ServerEntry:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (stdio) or `url` (streamable HTTP), not both")
        if self.url is not None and self.type == "stdio":
            raise ValueError("type stdio needs `command`, not `url`")
        if self.command is not None and self.type not in (None, "stdio"):
            raise ValueError(f"type {self.type} needs `url`, not `command`")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        for where, text in (
            [("command", self.command or ""), ("url", self.url or "")]
            + [("args", a) for a in self.args]
            + [("cwd", self.cwd or "")]
        ):
            if KEY_REF_RE.search(text):
                raise ValueError(
                    f"a ${{key:...}} reference in {where} would put a key in argv or a URL; "
                    "pass it in `env` (stdio) or `headers` (HTTP)"
                )
        return self

    @property
    def transport(self) -> str:
        """`stdio` or `http`."""
        return "stdio" if self.command is not None else "http"

    def effect_of(self, tool: str) -> str:
        """The effect class of one of the server's tools."""
        return self.effects.get(tool, self.effect)

    def key_refs(self) -> list[str]:
        """The stored keys the entry's env and headers refer to."""
        found: list[str] = []
        for value in [*self.env.values(), *self.headers.values()]:
            found += KEY_REF_RE.findall(value)
        return found


@dataclass(frozen=True)
class McpServer:
    """A server as declared: its name, the file that declared it, and its entry."""

    name: str
    source: Path
    entry: ServerEntry

    def identity(self) -> str:
        """What makes two declarations the same server to start (a worker shares one
        process per identity between its sessions)."""
        return f"{self.name}\0{self.entry.model_dump_json(by_alias=True)}"


@dataclass
class McpServers:
    """Every server a session could be given, the later file winning on a name."""

    servers: dict[str, McpServer] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    # (name, loser, winner) of a server declared again in a later file.
    overrides: list[tuple[str, Path, Path]] = field(default_factory=list)

    def add_file(self, path: Path, data: Any) -> None:
        """Take in one `.mcp.json` (already parsed); its problems are kept by file and field."""
        if not isinstance(data, dict):
            self.problems.append(Problem(path, None, f"{MCP_FILE} must be a JSON object"))
            return
        entries = data.get("mcpServers", {})
        if not isinstance(entries, dict):
            self.problems.append(Problem(path, "mcpServers", "must map server names to entries"))
            return
        for name, raw in entries.items():
            server = self._entry(path, name, raw)
            if server is None:
                continue
            old = self.servers.get(name)
            if old is not None:
                self.overrides.append((name, old.source, path))
            self.servers[name] = server

    def _entry(self, path: Path, name: str, raw: Any) -> McpServer | None:
        where = f"mcpServers.{name}"
        if not SERVER_NAME_RE.match(name):
            self.problems.append(
                Problem(
                    path,
                    where,
                    "a server name is letters, digits, '-' and single '_' (its tools are "
                    "named SERVER__TOOL, so '__' in it would be ambiguous)",
                )
            )
            return None
        if not isinstance(raw, dict):
            self.problems.append(Problem(path, where, "must be an object"))
            return None
        try:
            entry = ServerEntry.model_validate(raw)
        except ValidationError as exc:
            for error in exc.errors(include_url=False):
                loc = ".".join(str(p) for p in error["loc"])
                self.problems.append(
                    Problem(
                        path,
                        f"{where}.{loc}" if loc else where,
                        error["msg"].removeprefix("Value error, "),
                    )
                )
            return None
        for key in entry.model_extra or {}:
            self.problems.append(
                Problem(path, f"{where}.{key}", "unknown field (kept, not used)", "warning")
            )
        return McpServer(name, path, entry)

    def granted(self, names: list[str] | None) -> tuple[list[McpServer], list[str]]:
        """The servers a session gets: those it names (an agent's `mcpServers:`), else the
        ones marked `default`; and the names it asked for that no file declares."""
        if names is None:
            return [s for s in self.servers.values() if s.entry.default], []
        found = [self.servers[n] for n in names if n in self.servers]
        return found, [n for n in names if n not in self.servers]

    def problems_of(self, name: str) -> list[Problem]:
        """The errors reported for a server of that name (why it is missing)."""
        key = f"mcpServers.{name}"
        return [
            p
            for p in self.problems
            if p.level == "error"
            and p.field is not None
            and (p.field == key or p.field.startswith(key + "."))
        ]


def read_mcp_file(path: Path) -> tuple[Any, list[Problem]]:
    """A `.mcp.json` parsed (None when absent or broken, with its problem)."""
    if not path.is_file():
        return None, []
    try:
        return json.loads(path.read_text(encoding="utf-8")), []
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(path, None, f"cannot read: {exc}")]
    except json.JSONDecodeError as exc:
        return None, [Problem(path, None, f"not valid JSON: {exc.msg} (line {exc.lineno})")]


# Tiers whose `.mcp.json` comes before the workdir's own `.mcp.json` (Claude Code's project
# file); the project's `.swarmdeck/.mcp.json` and folders given by hand come after it.
EARLY_TIERS = ("system", "mgmt", "user")


def collect_servers(plugins: Iterable[Plugin], workdir: Path | None) -> McpServers:
    """The servers of every plugin (in tier order) and of `<workdir>/.mcp.json`."""
    found = McpServers()
    plugins = list(plugins)
    ordered: list[tuple[Path, Any]] = [
        (p.path / MCP_FILE, p.mcp) for p in plugins if p.tier in EARLY_TIERS and p.mcp is not None
    ]
    if workdir is not None:
        path = Path(workdir) / MCP_FILE
        data, problems = read_mcp_file(path)
        found.problems += problems
        if data is not None:
            ordered.append((path, data))
    ordered += [
        (p.path / MCP_FILE, p.mcp)
        for p in plugins
        if p.tier not in EARLY_TIERS and p.mcp is not None
    ]
    for path, data in ordered:
        found.add_file(path, data)
    return found


def mcp_problems(plugins: Iterable[Plugin], workdir: Path | None) -> list[Problem]:
    """What `agents validate` reports of MCP: every `.mcp.json` problem, and each agent's
    `mcpServers:` naming a server no file declares."""
    plugins = list(plugins)
    found = collect_servers(plugins, workdir)
    problems = list(found.problems)
    for plugin in plugins:
        for agent in plugin.agents:
            problems += [
                Problem(agent.path, "mcpServers", f"no .mcp.json declares a server {name!r}")
                for name in agent.mcp_servers or []
                if name not in found.servers
            ]
    return problems
