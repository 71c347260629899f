"""Named agents as sessions: what an agent's definition puts in a session it starts (prompt,
tools, skills, first message, cron), for `run --agent`, spawn_agent and system agents."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.errors import UsageError
from swarmdeck.plugins.aliases import resolve_tool, resolve_tools
from swarmdeck.plugins.definitions import AgentDef, SkillDef
from swarmdeck.plugins.tiers import PluginSet, base_agent
from swarmdeck.runtime.request import SessionRequest
from swarmdeck.tools.builtins.control import CONTROL_TOOLS
from swarmdeck.tools.builtins.skills import LOAD_SKILL

# The runtime's own tools: every named agent has them, whatever its `tools:` says.
CORE_TOOLS = (
    *(t.name for t in CONTROL_TOOLS),
    LOAD_SKILL,
    "list_agents",
    "list_available_models",
    "submit_result",
)


def skills_shown(
    record: SessionRecord, plugins_of: Callable[[SessionRecord], PluginSet]
) -> list[SkillDef]:
    """The skills a session's index lists (none when it cannot load them); its plugins are
    only looked up when it can."""
    if record.tool_names is not None and LOAD_SKILL not in record.tool_names:
        return []
    plugin_set = plugins_of(record)
    agent = plugin_set.agent(record.agent) if record.agent else None
    return plugin_set.skills_for(agent)


# A system agent runs until it is stopped: no step cap.
UNCAPPED_TURNS = 2**31 - 1


@dataclass(frozen=True)
class AgentSession:
    """The session fields a named agent sets."""

    agent: str
    system_message: str
    tool_names: list[str] | None
    task: str
    model: str | None
    title: str | None
    options: dict[str, Any] = field(default_factory=dict)

    def session_fields(self) -> dict[str, Any]:
        """The fields a session takes from its agent as they are (its model, workdir and
        options are the caller's to decide)."""
        kept = ("task", "title", "system_message", "tool_names", "agent")
        return {name: getattr(self, name) for name in kept}


def agent_tools(agent: AgentDef) -> list[str] | None:
    """The tools a session of this agent is offered: its `tools:` (aliases resolved), the
    base agent's, and the runtime's own; None (every default tool) without a `tools:`."""
    if agent.tools is None:
        return None
    return resolve_tools([*agent.tools, *(base_agent().tools or []), *CORE_TOOLS])


def cron_option(agent: AgentDef, now: float) -> dict[str, Any] | None:
    """The agent's front-matter cron as the loop keeps it."""
    if agent.cron is None:
        return None
    return {
        "interval": agent.cron.seconds,
        "reason": agent.cron.reason,
        "next_at": now + agent.cron.seconds,
        "check": resolve_tool(agent.cron.check) if agent.cron.check else None,
        "check_args": agent.cron.args,
    }


def agent_session(
    agent: AgentDef,
    plugin_set: PluginSet,
    task: str | None = None,
    plugins: list[str] | None = None,
    now: float | None = None,
) -> AgentSession:
    """What a session of `agent` is made of; its preloaded skills' bodies join its prompt."""
    skills = [plugin_set.skills[s] for s in agent.skills if s in plugin_set.skills]
    prompt = "\n\n".join([agent.body, *(f"## Skill: {s.name}\n\n{s.body}" for s in skills)]).strip()
    first = task or agent.initial_prompt or agent.description
    if not first:
        raise UsageError(
            f"agent {agent.name} has no initialPrompt or description to start from",
            "pass a task",
        )
    options: dict[str, Any] = {"skills": [s.name for s in skills]}
    # Always set: a named sub-agent without `mcpServers:` gets the default servers, not
    # its parent's grant.
    options["mcp_servers"] = list(agent.mcp_servers) if agent.mcp_servers is not None else None
    if plugins:
        options["plugins"] = plugins
    if agent.compact_at is not None:
        options["compact_at"] = agent.compact_at
    if agent.core_tools is not None:
        options["core_tools"] = resolve_tools(agent.core_tools)
    cron = cron_option(agent, time.time() if now is None else now)
    if cron is not None:
        options["cron"] = cron
        options["one_shot"] = False
    return AgentSession(
        agent=agent.name,
        system_message=prompt,
        tool_names=agent_tools(agent),
        task=first,
        model=agent.model,
        title=agent.title or agent.name,
        options=options,
    )


def named_request(
    agent: AgentDef,
    plugin_set: PluginSet,
    *,
    task: str | None,
    model: str,
    workdir: Path,
    plugins: list[str] | None = None,
    options: dict[str, Any] | None = None,
) -> SessionRequest:
    """A session request for a named agent (`run --agent`, the SDK): its prompt, tools,
    skills, first message and cron, on `model` (the caller's choice, or the agent's own)."""
    if agent.system:
        raise UsageError(
            f"{agent.name} is a system agent: it runs once per store",
            "start the system agents with `swarmdeck system start --model PROVIDER:MODEL`",
        )
    named = agent_session(agent, plugin_set, task, plugins)
    merged = {**(options or {}), **named.options}
    if named.options.get("one_shot") is False:
        merged["one_shot"] = False
    return SessionRequest(model=model, workdir=workdir, options=merged, **named.session_fields())
