"""Plugins from every tier, merged: packaged `system`, packaged `mgmt`, the user's
(`~/.swarmdeck/` and `~/.swarmdeck/plugins/*/`), the project's (`<workdir>/.swarmdeck/`),
then folders given on the command line or to the SDK. On a name collision the later wins."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from swarmdeck.plugins.definitions import (
    SHARED_SKILL_TIERS,
    AgentDef,
    Plugin,
    Problem,
    SkillDef,
)
from swarmdeck.plugins.loader import is_plugin_dir, load_plugin

PACKAGED_DIR = Path(__file__).parent / "packaged"
BASE_AGENT = "default"
PROJECT_DIR = ".swarmdeck"


@dataclass(frozen=True)
class Override:
    """A definition that a later tier replaced."""

    kind: str  # "agent" or "skill"
    name: str
    loser: Path
    winner: Path


@dataclass
class PluginSet:
    """Every plugin a session (or a command) sees, with the winners by name."""

    plugins: list[Plugin] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    agents: dict[str, AgentDef] = field(default_factory=dict)
    skills: dict[str, SkillDef] = field(default_factory=dict)
    overrides: list[Override] = field(default_factory=list)

    def add(self, plugin: Plugin, problems: Iterable[Problem] = ()) -> None:
        """Take in a plugin of a later tier: its definitions win over earlier ones."""
        self.plugins.append(plugin)
        self.problems.extend(problems)
        for agent in plugin.agents:
            old = self.agents.get(agent.name)
            if old is not None:
                self.overrides.append(Override("agent", agent.name, old.path, agent.path))
            self.agents[agent.name] = agent
        for skill in plugin.skills:
            old_skill = self.skills.get(skill.name)
            if old_skill is not None:
                self.overrides.append(Override("skill", skill.name, old_skill.path, skill.path))
            self.skills[skill.name] = skill

    def agent(self, name: str) -> AgentDef | None:
        """The winning agent of that name."""
        return self.agents.get(name)

    def system_agents(self) -> list[AgentDef]:
        """Agents with `system: true`, parents before their children."""
        found = [a for a in self.agents.values() if a.system]
        ids = {a.agent_id for a in found}
        ordered: list[AgentDef] = []
        placed: set[str] = set()
        while len(ordered) < len(found):
            progress = False
            for a in found:
                if a.agent_id in placed:
                    continue
                if a.parent is None or a.parent not in ids or a.parent in placed:
                    ordered.append(a)
                    placed.add(a.agent_id)
                    progress = True
            if not progress:  # a parent cycle: the rest start as roots
                ordered += [a for a in found if a.agent_id not in placed]
                break
        return ordered

    def system_agent(self, agent_id: str) -> AgentDef | None:
        """The system agent with this id."""
        return next((a for a in self.system_agents() if a.agent_id == agent_id), None)

    def skills_for(self, agent: AgentDef | None) -> list[SkillDef]:
        """The skills a session of this agent is offered: the shared tiers' skills, those of
        the agent's own plugin, and those it names."""
        named = set(agent.skills) if agent else set()
        return [
            s
            for s in self.skills.values()
            if s.tier in SHARED_SKILL_TIERS
            or (agent is not None and s.plugin == agent.plugin and s.tier == agent.tier)
            or s.name in named
        ]


@functools.lru_cache(maxsize=1)
def packaged() -> tuple[tuple[Plugin, tuple[Problem, ...]], ...]:
    """The packaged plugins (read once: they ship with the code)."""
    out = []
    for tier in ("system", "mgmt"):
        plugin, problems = load_plugin(PACKAGED_DIR / tier, tier, tier)
        out.append((plugin, tuple(problems)))
    return tuple(out)


def base_agent() -> AgentDef:
    """The packaged `system` plugin's base agent, whose body opens every system prompt."""
    system_plugin = packaged()[0][0]
    agent = next((a for a in system_plugin.agents if a.name == BASE_AGENT), None)
    assert agent is not None, "the packaged system plugin has no base agent"
    return agent


def user_folders(home: Path) -> list[tuple[Path, str]]:
    """The user's plugin folders: the home itself (agents/, skills/), then plugins/*/."""
    found: list[tuple[Path, str]] = []
    if is_plugin_dir(home):
        found.append((home, "user"))
    plugins = home / "plugins"
    if plugins.is_dir():
        found += [(p, p.name) for p in sorted(plugins.iterdir()) if p.is_dir()]
    return found


def given_folders(path: Path) -> list[tuple[Path, str]]:
    """A folder named on the command line: a plugin, or a folder of plugins."""
    if is_plugin_dir(path):
        return [(path, path.name)]
    if path.is_dir():
        subs = [(p, p.name) for p in sorted(path.iterdir()) if is_plugin_dir(p)]
        if subs:
            return subs
    return []


def load_plugin_set(
    home: Path,
    workdir: Path | None = None,
    given: Iterable[Path] = (),
    *,
    with_packaged: bool = True,
) -> PluginSet:
    """Every tier, in order; problems of every file are kept on the set."""
    plugin_set = PluginSet()
    if with_packaged:
        for plugin, problems in packaged():
            plugin_set.add(plugin, problems)
    for path, name in user_folders(home):
        plugin_set.add(*load_plugin(path, "user", name))
    if workdir is not None:
        project = Path(workdir) / PROJECT_DIR
        if is_plugin_dir(project):
            plugin_set.add(*load_plugin(project, "project", "project"))
    for folder in given:
        folder = Path(folder)
        found = given_folders(folder)
        if not found:
            plugin_set.problems.append(
                Problem(folder, None, "not a plugin folder (no plugin.json, agents/ or skills/)")
            )
        for path, name in found:
            plugin_set.add(*load_plugin(path, "given", name))
    return plugin_set
