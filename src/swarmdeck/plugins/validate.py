"""Check what the loader cannot: tools that swarmdeck lacks (after the alias table), skills
and parents that do not exist, check tools of crons, models no provider serves."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from swarmdeck.plugins.aliases import resolve_tool
from swarmdeck.plugins.definitions import AgentDef, Problem
from swarmdeck.plugins.tiers import PluginSet

# Returns None when the model name resolves, else why not.
ModelCheck = Callable[[str], str | None]


def _missing_tool(name: str) -> str:
    resolved = resolve_tool(name)
    via = f" (alias of {resolved})" if resolved != name else ""
    return f"swarmdeck has no tool {name!r}{via}"


def check_references(
    plugin_set: PluginSet, known_tools: Iterable[str], check_model: ModelCheck | None = None
) -> list[Problem]:
    """Problems of references between definitions and to swarmdeck's tools and models."""
    known = set(known_tools)
    problems: list[Problem] = []
    system_ids = {a.agent_id for a in plugin_set.agents.values() if a.system}
    for plugin in plugin_set.plugins:
        for agent in plugin.agents:
            problems += _agent_problems(agent, plugin_set, known, system_ids, check_model)
        for skill in plugin.skills:
            tools_json = skill.path.parent / "tools.json"
            problems += [
                Problem(tools_json, "tools", _missing_tool(t))
                for t in skill.tools
                if resolve_tool(t) not in known
            ]
    return problems


def _agent_problems(
    agent: AgentDef,
    plugin_set: PluginSet,
    known: set[str],
    system_ids: set[str],
    check_model: ModelCheck | None,
) -> list[Problem]:
    problems = [
        Problem(agent.path, "tools", _missing_tool(t))
        for t in agent.tools or []
        if resolve_tool(t) not in known
    ]
    problems += [
        Problem(agent.path, "skills", f"no skill named {s!r} in any plugin")
        for s in agent.skills
        if s not in plugin_set.skills
    ]
    if agent.parent is not None and agent.parent not in system_ids:
        problems.append(Problem(agent.path, "parent", f"no system agent with id {agent.parent!r}"))
    if agent.parent is not None and not agent.system:
        problems.append(Problem(agent.path, "parent", "only a system agent has a parent"))
    if agent.cron is not None and agent.cron.check is not None:
        check = resolve_tool(agent.cron.check)
        if check not in known:
            problems.append(Problem(agent.path, "cron.check", _missing_tool(agent.cron.check)))
    if agent.model is not None and check_model is not None:
        why = check_model(agent.model)
        if why is not None:
            problems.append(Problem(agent.path, "model", why))
    return problems


def report(
    plugin_set: PluginSet,
    known_tools: Iterable[str],
    check_model: ModelCheck | None = None,
    only_under: Iterable[Path] | None = None,
) -> list[Problem]:
    """Every problem (format and references), optionally of the files under some folders,
    ordered by file."""
    found = [*plugin_set.problems, *check_references(plugin_set, known_tools, check_model)]
    if only_under is not None:
        roots = [Path(p).resolve() for p in only_under]
        found = [p for p in found if any(_under(p.path, r) for r in roots)]
    return sorted(found, key=lambda p: (str(p.path), p.level != "error", p.field or ""))


def _under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except ValueError:
        return False
    return True
