"""System agents: enabled once per store (`swarmdeck system start`, or the
SWARMDECK_SYSTEM_MODEL setting), kept running by every worker, each under a session id
derived from its `id`. Two workers starting them at the same moment make one session each:
the catalog's insert-or-get on the derived id, then the engine's idempotent start."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swarmdeck.catalog.records import SessionRecord, system_session_id
from swarmdeck.catalog.system_agents import SystemAgentRow, SystemAgents
from swarmdeck.plugins.definitions import AgentDef
from swarmdeck.plugins.tiers import PluginSet
from swarmdeck.runtime.agents import UNCAPPED_TURNS, agent_session
from swarmdeck.workspace.rundir import RunDir

if TYPE_CHECKING:
    from swarmdeck.runtime.host import Host

# An ended system session is started again, but not more often than this (a bad key must
# not make a restart loop).
RESTART_BACKOFF_SECONDS = 60.0


@dataclass(frozen=True)
class Enabled:
    """A system agent to keep running, and the plugins it is defined in."""

    row: SystemAgentRow
    agent: AgentDef | None


def enabled_agents(host: Host) -> list[Enabled]:
    """The enabled system agents, parents first: the store's table, and (for agents the
    table does not mention) the SWARMDECK_SYSTEM_MODEL setting."""
    table = SystemAgents(host.catalog.engine)
    rows = {r.agent_id: r for r in table.rows()}
    settings = host.settings
    if not rows and not settings.system_model:
        return []  # never enabled here: the common case costs one read a cycle
    found: list[Enabled] = []
    plugin_sets: dict[tuple[str, ...], PluginSet] = {}

    def plugins(given: list[str]) -> PluginSet:
        key = tuple(given)
        if key not in plugin_sets:
            plugin_sets[key] = host.services.plugins_for(str(settings.system_dir), given)
        return plugin_sets[key]

    default = plugins([])
    ids = [a.agent_id for a in default.system_agents()]
    missing = [i for i in ids if i not in rows]
    if missing and settings.system_model:
        # The setting enables them as `system start` would; from then on the table (and
        # `system stop`) decides.
        table.enable(missing, settings.system_model, [])
        rows = {r.agent_id: r for r in table.rows()}
    ids += [i for i in rows if i not in ids]
    for agent_id in ids:
        row = rows.get(agent_id)
        if row is None or not row.enabled:
            continue
        found.append(Enabled(row, plugins(row.plugins).system_agent(agent_id)))
    order = {a.agent_id: i for i, a in enumerate(default.system_agents())}
    return sorted(found, key=lambda e: order.get(e.row.agent_id, len(order)))


async def keep_system_agents(host: Host) -> list[str]:
    """Keep the enabled system agents running (the worker loop calls this each cycle):
    create and start a missing session, start one never started, restart one that ended
    (one cancelled only if the agents were started again since). Returns what it did."""
    done: list[str] = []
    engine = host.launch()
    # The store is read and written in threads: on PostgreSQL each statement is a round
    # trip, and a worker's sessions share the loop this runs on, each cycle.
    for item, record in await asyncio.to_thread(_agents_and_sessions, host):
        sid = system_session_id(item.row.agent_id)
        if record is None:
            if item.agent is None:
                continue  # enabled, but no plugin defines it any more: `system status` says so
            record = await asyncio.to_thread(create_system_session, host, item.agent, item.row)
            done.append(f"started {sid}")
        if record.status == "pending":
            await engine.start_session(sid)
        elif (
            record.terminal
            # A person's cancel stands until the agents are started again.
            and (record.status != "cancelled" or item.row.updated_at > record.updated_at)
            and await restart(host, record, item.row)
        ):
            done.append(f"restarted {sid} (it had {record.status})")
    return done


def _agents_and_sessions(host: Host) -> list[tuple[Enabled, SessionRecord | None]]:
    """The enabled system agents, each with its session (None: not created yet)."""
    return [
        (item, host.catalog.find_session(system_session_id(item.row.agent_id)))
        for item in enabled_agents(host)
    ]


def create_system_session(host: Host, agent: AgentDef, row: SystemAgentRow) -> SessionRecord:
    """The agent's session, created once per store (insert-or-get on its derived id)."""
    settings = host.settings
    sid = system_session_id(agent.agent_id)
    plugin_set = host.services.plugins_for(str(settings.system_dir), row.plugins)
    named = agent_session(agent, plugin_set, plugins=row.plugins or None)
    parent = host.catalog.find_session(system_session_id(agent.parent)) if agent.parent else None
    settings.system_dir.mkdir(parents=True, exist_ok=True)
    run_dir = RunDir.create(settings.runs_dir, sid)
    return host.catalog.create_session(
        session_id=sid,
        parent_id=parent.id if parent else None,
        root_id=parent.root_id if parent else None,
        depth=parent.depth + 1 if parent else 0,
        model=row.model,
        mode="agent",
        workdir=str(settings.system_dir.resolve()),
        run_dir=str(run_dir.path),
        **named.session_fields(),
        options={
            **named.options,
            "system_agent": agent.agent_id,
            "one_shot": False,
            "max_turns": UNCAPPED_TURNS,
        },
        # This process starts it at once; should it die first, its lease's takeover does.
        executor=host.lease().executor_id,
    )


async def restart(host: Host, record: SessionRecord, row: SystemAgentRow) -> bool:
    """Start an ended system session's next generation, at most once per backoff period and
    by one worker only (the claim is a compare-and-set on the agent's row)."""
    if time.time() - row.restarted_at < RESTART_BACKOFF_SECONDS:
        return False
    if not await asyncio.to_thread(_claim_restart, host, record, row):
        return False
    await host.launch().next_generation(record.id)
    return True


def _claim_restart(host: Host, record: SessionRecord, row: SystemAgentRow) -> bool:
    """Claim the restart (one worker wins) and ready the session for its next generation."""
    if not SystemAgents(host.catalog.engine).claim_restart(row.agent_id, row.restarted_at):
        return False
    catalog = host.catalog
    catalog.update_session(record.id, status="pending", error=None)
    catalog.append_event(
        record.id,
        f"restart:{record.generation + 1}",
        "user",
        {"text": f"You were restarted after your session ended ({record.status}). Carry on."},
    )
    return True
