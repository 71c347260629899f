"""The Python SDK: start durable sessions, talk to them, and wait for their results."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmdeck.catalog.records import EventRecord
from swarmdeck.config import HOME_ENV, STORE_ENV, load_settings
from swarmdeck.errors import UsageError
from swarmdeck.runtime.host import Host, SessionRequest, default_tools
from swarmdeck.tools.base import Tool

POLL_SECONDS = 0.05


@dataclass
class AgentSpec:
    """How to start a session: the model, its prompt, its tools and its limits."""

    model: str
    system_message: str | None = None
    mode: str = "agent"
    tool_names: list[str] | None = None
    max_turns: int = 50
    budget: dict[str, float] = field(default_factory=dict)
    persistent: bool = False
    # A named agent (an .agent.md of a plugin tier): its prompt, tools, skills and first
    # message; the fields above still set the model, mode and limits.
    agent: str | None = None
    # Further session options: rollover_iterations, max_children, max_depth... The typed
    # fields above win over the same keys here.
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class SessionResult:
    """How a session ended."""

    status: str
    text: str
    result: Any
    error: str | None


class Session:
    """A handle on one durable session."""

    def __init__(self, swarm: Swarm, session_id: str) -> None:
        self.swarm = swarm
        self.id = session_id

    @property
    def status(self) -> str:
        """The session's status now."""
        return self.swarm.host.catalog.get_session(self.id).status

    async def _status_off_loop(self) -> str:
        # In a thread: on PostgreSQL a read is a round trip, and the sessions this process
        # runs share the caller's loop.
        return await asyncio.to_thread(lambda: self.status)

    async def send(self, text: str, msg_id: str | None = None, pinned: bool = False) -> bool:
        """Deliver a message; the same msg_id twice is delivered once. A pinned message is
        kept verbatim when older turns are compacted."""
        fresh = await asyncio.to_thread(self.swarm.host.send, self.id, text, msg_id, pinned=pinned)
        await self.swarm.host.ring(self.id)
        return fresh

    async def answer(self, text: str, msg_id: str | None = None) -> bool:
        """Answer the session's ask_user question."""
        fresh = await asyncio.to_thread(self.swarm.host.answer, self.id, text, msg_id)
        await self.swarm.host.ring(self.id)
        return fresh

    async def wait_for_status(self, *statuses: str, timeout: float = 60) -> str:
        """Poll until the session reaches one of these statuses."""
        deadline = asyncio.get_running_loop().time() + timeout
        while (status := await self._status_off_loop()) not in statuses:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"session {self.id} stayed {status}")
            await asyncio.sleep(POLL_SECONDS)
        return status

    async def result(self, timeout: float | None = None) -> SessionResult:
        """Wait until the session ends or, a persistent one, rests with every message sent
        to it answered; its text is then the model's latest answer."""
        deadline = asyncio.get_running_loop().time() + (timeout or 3600)
        # Read in a thread: on PostgreSQL a read is a round trip, and the sessions this
        # process runs share the loop this waits on.
        while (found := await asyncio.to_thread(self._rested)) is None:
            if asyncio.get_running_loop().time() > deadline:
                status = await self._status_off_loop()
                raise TimeoutError(f"session {self.id} stayed {status}")
            await asyncio.sleep(POLL_SECONDS)
        return found

    def _rested(self) -> SessionResult | None:
        """The session's result once it has ended or rests with nothing pending, else None."""
        catalog = self.swarm.host.catalog
        # A message still in the inbox means a turn is coming: not rested yet. The inbox is
        # read before the status: taking messages marks the session running in the same
        # transaction, so this order never sees "idle, nothing pending" in between.
        pending = catalog.pending_count(self.id)
        record = catalog.get_session(self.id)
        if not (record.terminal or (record.status == "idle" and not pending)):
            return None
        text = record.final_text or ""
        if not record.terminal:
            last = catalog.last_event(self.id, ["assistant"])
            text = last.payload["text"] if last else ""
        return SessionResult(record.status, text, record.result, record.error)

    def transcript(self) -> list[EventRecord]:
        """The stored transcript."""
        return self.swarm.host.catalog.events(self.id)

    async def cancel(self) -> list[str]:
        """Cancel the session and its sub-agents."""
        return await self.swarm.host.cancel(self.id)


class Swarm:
    """Durable sessions on a SQLite file or PostgreSQL: handed to the fleet of workers when
    one serves the store, else run in this process.

    Sessions go to the fleet only when they need nothing this process alone has: with your
    own `tools`, or `local=True`, they run here.
    """

    def __init__(
        self,
        store: str | None = None,
        home: str | Path | None = None,
        tools: list[Tool] | None = None,
        plugins: list[str | Path] | None = None,
        *,
        local: bool = False,
    ) -> None:
        # Plugin folders after every tier (the last wins on a name); kept with each session
        # started here, so any worker that takes one over sees the same agents and skills.
        self.plugins = [str(Path(p).resolve()) for p in plugins or []]
        if home is not None:
            os.environ[HOME_ENV] = str(home)
        if store is not None:
            os.environ[STORE_ENV] = store
        from swarmdeck.dispatch.schemas import VALIDATORS
        from swarmdeck.swarm.launch import register

        # A worker has the built-in tools only: a session offered others must run here.
        self.local = local or bool(tools)
        self.host = Host(load_settings(), [*default_tools(), *(tools or [])])
        self.host.services.result_validators.update(VALIDATORS)
        register(self.host.services)
        self.host.launch()

    async def __aenter__(self) -> Swarm:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the MCP servers this process started and the adapters' pools, then the
        engine (close())."""
        await self.host.aclose()

    def close(self) -> None:
        """Stop this process's engine; unfinished sessions stay resumable."""
        self.host.shutdown()

    async def start(
        self,
        task: str | None,
        agent: AgentSpec | str,
        *,
        workdir: str | Path = ".",
        title: str | None = None,
    ) -> Session:
        """Start a session on a task; `agent` is an AgentSpec or just `provider:model`. A
        named agent (AgentSpec.agent) may start without a task: its initialPrompt is used."""
        [session] = await self._start_requests([self._request(task, agent, workdir, title)])
        return session

    async def start_all(
        self, tasks: Iterable[str], agent: AgentSpec | str, *, workdir: str | Path = "."
    ) -> list[Session]:
        """Start a session on each task at once, all stored in one transaction (a thousand
        handed to the fleet one by one waited on the workers running the first ones)."""
        return await self._start_requests([self._request(t, agent, workdir) for t in tasks])

    def _request(
        self,
        task: str | None,
        agent: AgentSpec | str,
        workdir: str | Path,
        title: str | None = None,
    ) -> SessionRequest:
        spec = AgentSpec(agent) if isinstance(agent, str) else agent
        options: dict[str, Any] = {
            **spec.options,
            "max_turns": spec.max_turns,
            "one_shot": not spec.persistent,
        }
        if spec.budget:
            options["budget"] = spec.budget
        if self.plugins:
            options["plugins"] = self.plugins
        if spec.agent is not None:
            request = self._named(task, spec, Path(workdir), options)
        elif task is None:
            raise UsageError("start needs a task (or a named agent)", "pass the task text")
        else:
            request = SessionRequest(
                task,
                spec.model,
                Path(workdir),
                mode=spec.mode,
                title=title,
                system_message=spec.system_message,
                tool_names=spec.tool_names,
                options=options,
            )
        if title is not None:
            request.title = title
        return request

    async def _start_requests(self, requests: list[SessionRequest]) -> list[Session]:
        """Hand the sessions to the fleet when a worker serves the store, else start them
        here."""
        if not requests:
            return []
        fleet = not self.local and bool(await asyncio.to_thread(self.host.fleet_workers))
        records = await asyncio.to_thread(self.host.create_sessions, requests, fleet=fleet)
        if not fleet:
            await asyncio.gather(*(self.host.start(r.id) for r in records))
        return [Session(self, r.id) for r in records]

    def _named(
        self, task: str | None, spec: AgentSpec, workdir: Path, options: dict[str, Any]
    ) -> SessionRequest:
        """The session of a named agent of this swarm's plugins."""
        from swarmdeck.runtime.agents import named_request

        assert spec.agent is not None
        found = self.host.services.plugins_for(str(workdir.resolve()), self.plugins)
        definition = found.agent(spec.agent)
        if definition is None:
            known = ", ".join(sorted(found.agents)) or "none"
            raise UsageError(f"no agent named {spec.agent} (known: {known})")
        request = named_request(
            definition,
            found,
            task=task,
            model=spec.model,
            workdir=workdir,
            plugins=self.plugins,
            options=options,
        )
        request.mode = spec.mode
        return request

    async def coordinate(
        self,
        task: str,
        team: str | Path | None = None,
        *,
        workdir: str | Path = ".",
        model: str | None = None,
        plan: str | Path | list[dict[str, Any]] | None = None,
        max_members: int | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run a swarm on a task and return its `swarmdeck.swarm` object (plan, members with
        their verdicts and results, the merged result, verdict, tokens, cost, duration).

        `team` is a team's name or file; `plan` a plan file or the plan itself (which skips
        the decomposition); `model` the coordinator's provider:model.
        """
        from swarmdeck.swarm.launch import SwarmRequest, prepare_swarm
        from swarmdeck.swarm.report import build_report

        given = plan if isinstance(plan, list | dict) else None
        request = prepare_swarm(
            SwarmRequest(
                task=task,
                workdir=Path(workdir),
                team=str(team) if team is not None else None,
                plan_file=Path(plan) if isinstance(plan, str | Path) else None,
                plan=given,
                max_members=max_members,
                model=model,
                timeout_s=timeout,
                plugins=tuple(self.plugins),
            ),
            self.host.services,
        )
        record = self.host.create_session(request)
        await self.host.start(record.id)
        await self.host.wait(record.id)
        return await asyncio.to_thread(build_report, self.host.catalog, record.id)

    def recover(self) -> list[str]:
        """Take over the unfinished sessions of workers (processes) that died; returns the
        executor ids taken over. Their sessions continue in this process."""
        return self.host.launch().recover_dead_workers()

    def session(self, session_id: str) -> Session:
        """A handle on an existing session."""
        return Session(self, self.host.catalog.resolve_session_id(session_id))
