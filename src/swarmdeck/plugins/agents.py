"""Named agents from `*.agent.md` files: YAML front matter, then the system prompt."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from swarmdeck.errors import ConfigError


@dataclass(frozen=True)
class AgentDef:
    """One named agent."""

    name: str
    description: str
    system_message: str
    model: str | None
    tools: list[str] | None
    path: Path


def parse_agent_file(path: Path) -> AgentDef:
    """Read one .agent.md file; ConfigError names the file when it is malformed."""
    text = path.read_text(encoding="utf-8")
    meta: dict = {}
    body = text
    if text.startswith("---"):
        _, front, body = text.split("---", 2)
        try:
            meta = yaml.safe_load(front) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: front matter is not valid YAML ({exc.problem})") from exc
        if not isinstance(meta, dict):
            raise ConfigError(f"{path}: front matter must be a mapping")
    name = meta.get("name") or path.name.removesuffix(".agent.md")
    tools = meta.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, str) for t in tools)
    ):
        raise ConfigError(f"{path}: field 'tools' must be a list of tool names")
    return AgentDef(
        name=str(name),
        description=str(meta.get("description", "")),
        system_message=body.strip(),
        model=meta.get("model"),
        tools=tools,
        path=path,
    )


def agent_dirs(workdir: str | Path, home: Path) -> list[Path]:
    """Where agents are looked up, project first."""
    return [Path(workdir) / ".swarmdeck" / "agents", home / "agents"]


def find_agent(name: str, workdir: str | Path, home: Path) -> AgentDef | None:
    """The agent of that name, project files first, then the user's."""
    for folder in agent_dirs(workdir, home):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.agent.md")):
            agent = parse_agent_file(path)
            if agent.name == name:
                return agent
    return None
