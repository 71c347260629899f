"""Load one plugin folder: plugin.json, agents/*.agent.md, skills/<name>/SKILL.md (+ tools.json)
and .mcp.json. Every problem is collected, by file and field; one bad file never hides
another, and no file is skipped without saying so."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from swarmdeck.plugins.definitions import AgentDef, Plugin, Problem, SkillDef
from swarmdeck.plugins.formats import (
    AgentFrontMatter,
    PluginManifest,
    SkillFrontMatter,
    SkillTools,
)
from swarmdeck.plugins.frontmatter import repair_block_scalars, split_front_matter

AGENT_SUFFIX = ".agent.md"
SYSTEM_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,59}$")
# What a folder must hold to be a plugin (any one of them).
MARKERS = ("plugin.json", "agents", "skills", ".mcp.json")

Model = TypeVar("Model", bound=BaseModel)
Named = TypeVar("Named", AgentDef, SkillDef)


def is_plugin_dir(path: Path) -> bool:
    """True when the folder holds any part of a plugin."""
    return path.is_dir() and any((path / m).exists() for m in MARKERS)


def load_plugin(path: Path, tier: str, name: str | None = None) -> tuple[Plugin, list[Problem]]:
    """The plugin in `path`, and every problem found in its files."""
    problems: list[Problem] = []
    manifest = _manifest(path / "plugin.json", problems)
    plugin = Plugin(
        name=(manifest.name if manifest and manifest.name else None) or name or path.name,
        path=path,
        tier=tier,
        version=manifest.version if manifest else None,
        description=manifest.description if manifest else "",
        extra=manifest.unknown_fields() if manifest else {},
    )
    plugin.agents = _agents(path / "agents", plugin, problems)
    plugin.skills = _skills(path / "skills", plugin, problems)
    plugin.mcp = _mcp(path / ".mcp.json", problems)
    return plugin, problems


def _read(path: Path, problems: list[Problem]) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(path, None, f"cannot read: {exc}"))
        return None


def _json(path: Path, problems: list[Problem]) -> Any:
    text = _read(path, problems)
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        problems.append(Problem(path, None, f"not valid JSON: {exc.msg} (line {exc.lineno})"))
        return None


def _validated(
    model: type[Model], data: Any, path: Path, problems: list[Problem], what: str
) -> Model | None:
    """The data as `model`, or None with each field error (and unknown fields) reported."""
    if not isinstance(data, dict):
        problems.append(Problem(path, None, f"{what} must be a mapping of fields"))
        return None
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"]) or None
            # A validator's own message reads best without pydantic's prefix.
            problems.append(Problem(path, where, error["msg"].removeprefix("Value error, ")))
        return None
    for key in getattr(parsed, "model_extra", None) or {}:
        problems.append(Problem(path, key, "unknown field (kept, not used)", "warning"))
    return parsed


def _manifest(path: Path, problems: list[Problem]) -> PluginManifest | None:
    if not path.exists():
        return None
    data = _json(path, problems)
    if data is None:
        return None
    return _validated(PluginManifest, data, path, problems, "plugin.json")


def _front(path: Path, problems: list[Problem]) -> tuple[dict[str, Any], str] | None:
    """The front matter as a mapping, and the body; None (reported) when unreadable."""
    text = _read(path, problems)
    if text is None:
        return None
    try:
        front, body = split_front_matter(text)
    except ValueError as exc:
        problems.append(Problem(path, None, str(exc)))
        return None
    if front is None:
        return {}, body
    meta = _yaml(front, path, problems)
    if meta is _BROKEN:
        return None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        problems.append(Problem(path, None, "front matter must be a mapping of fields"))
        return None
    return meta, body


_BROKEN = object()


def _yaml(front: str, path: Path, problems: list[Problem]) -> Any:
    """The front matter's YAML; a block scalar with under-indented lines is repaired (and
    said so) rather than refused; _BROKEN (reported) when it cannot be read."""
    try:
        return yaml.safe_load(front)
    except yaml.YAMLError as exc:
        fixed, keys = repair_block_scalars(front)
        if keys:
            try:
                data = yaml.safe_load(fixed)
            except yaml.YAMLError:
                pass
            else:
                for key in keys:
                    problems.append(
                        Problem(
                            path,
                            key,
                            "lines of this block are indented less than its first line; "
                            "read as part of the block",
                            "warning",
                        )
                    )
                return data
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        problems.append(Problem(path, None, f"front matter is not valid YAML: {problem}{at}"))
        return _BROKEN


def _agents(folder: Path, plugin: Plugin, problems: list[Problem]) -> list[AgentDef]:
    read = _each(
        folder,
        lambda path: path.name.endswith(AGENT_SUFFIX),
        lambda path: _agent(path, plugin, problems),
        f"ignored: agent files end in {AGENT_SUFFIX}",
        problems,
    )
    return _first_of_each_name(read, problems, "agent")


def _each(
    folder: Path,
    wanted: Callable[[Path], bool],
    read_one: Callable[[Path], Named | None],
    ignored: str,
    problems: list[Problem],
) -> Iterator[Named | None]:
    """Read each wanted entry of `folder`; say so of each other (hidden ones aside)."""
    if not folder.is_dir():
        return
    for path in sorted(folder.iterdir()):
        if wanted(path):
            yield read_one(path)
        elif not path.name.startswith("."):
            problems.append(Problem(path, None, ignored, "warning"))


def _first_of_each_name(
    found: Iterable[Named | None], problems: list[Problem], what: str
) -> list[Named]:
    """The definitions read, each name once: a second one of a name is a problem."""
    kept: list[Named] = []
    for item in found:
        if item is None:
            continue
        clash = next((k for k in kept if k.name == item.name), None)
        if clash is not None:
            problems.append(
                Problem(
                    item.path, "name", f"{what} {item.name!r} is defined twice (also {clash.path})"
                )
            )
            continue
        kept.append(item)
    return kept


def _agent(path: Path, plugin: Plugin, problems: list[Problem]) -> AgentDef | None:
    found = _front(path, problems)
    if found is None:
        return None
    meta, body = found
    front = _validated(AgentFrontMatter, meta, path, problems, "front matter")
    if front is None:
        return None
    name = front.name or path.name.removesuffix(AGENT_SUFFIX)
    if not name.strip():
        problems.append(Problem(path, "name", "must not be empty"))
        return None
    agent = AgentDef(
        name=name,
        description=front.description,
        body=body.strip(),
        path=path,
        plugin=plugin.name,
        tier=plugin.tier,
        title=front.title,
        system=front.system,
        id=front.id,
        parent=front.parent,
        tools=front.tools,
        skills=list(front.skills),
        initial_prompt=front.initial_prompt,
        splash=front.splash,
        model=front.model,
        cron=front.cron,
        mcp_servers=front.mcp_servers,
        compact_at=front.compact_at,
        core_tools=front.core_tools,
        extra=front.unknown_fields(),
    )
    if agent.system and not SYSTEM_ID_RE.match(agent.agent_id):
        problems.append(
            Problem(path, "id", "a system agent needs an id of letters, digits, '-' or '_'")
        )
        return None
    if not agent.body:
        problems.append(Problem(path, None, "the agent has no prompt (empty body)", "warning"))
    return agent


def _skills(folder: Path, plugin: Plugin, problems: list[Problem]) -> list[SkillDef]:
    read = _each(
        folder,
        lambda path: path.is_dir() and not path.name.startswith("."),
        lambda path: _skill(path, plugin, problems),
        "ignored: a skill is a folder with a SKILL.md",
        problems,
    )
    return _first_of_each_name(read, problems, "skill")


def _skill(folder: Path, plugin: Plugin, problems: list[Problem]) -> SkillDef | None:
    path = folder / "SKILL.md"
    if not path.is_file():
        problems.append(Problem(folder, None, "skill folder has no SKILL.md"))
        return None
    found = _front(path, problems)
    tools = _skill_tools(folder / "tools.json", problems)
    if found is None or tools is None:
        return None
    meta, body = found
    front = _validated(SkillFrontMatter, meta, path, problems, "front matter")
    if front is None:
        return None
    if not front.description:
        problems.append(
            Problem(path, "description", "missing: the skill index shows it", "warning")
        )
    return SkillDef(
        name=front.name or folder.name,
        description=front.description,
        body=body.strip(),
        path=path,
        plugin=plugin.name,
        tier=plugin.tier,
        tools=tools,
        extra=front.unknown_fields(),
    )


def _skill_tools(path: Path, problems: list[Problem]) -> list[str] | None:
    """The tools a tools.json names ([] without one); None when it is broken."""
    if not path.exists():
        return []
    data = _json(path, problems)
    if data is None:
        return None
    parsed = _validated(SkillTools, data, path, problems, "tools.json")
    return list(parsed.tools) if parsed is not None else None


def _mcp(path: Path, problems: list[Problem]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    data = _json(path, problems)
    if data is not None and not isinstance(data, dict):
        problems.append(Problem(path, None, ".mcp.json must be a JSON object"))
        return None
    return data
