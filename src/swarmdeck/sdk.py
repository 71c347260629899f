"""The Python SDK: start durable sessions, talk to them, and wait for their results."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmdeck.catalog.records import TERMINAL_STATUSES, EventRecord
from swarmdeck.config import HOME_ENV, STORE_ENV, load_settings
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

    async def send(self, text: str, msg_id: str | None = None) -> bool:
        """Deliver a message; the same msg_id twice is delivered once."""
        fresh = self.swarm.host.send(self.id, text, msg_id)
        await self.swarm.host.ring(self.id)
        return fresh

    async def answer(self, text: str, msg_id: str | None = None) -> bool:
        """Answer the session's ask_user question."""
        fresh = self.swarm.host.answer(self.id, text, msg_id)
        await self.swarm.host.ring(self.id)
        return fresh

    async def wait_for_status(self, *statuses: str, timeout: float = 60) -> str:
        """Poll until the session reaches one of these statuses."""
        deadline = asyncio.get_running_loop().time() + timeout
        while (status := self.status) not in statuses:
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"session {self.id} stayed {status}")
            await asyncio.sleep(POLL_SECONDS)
        return status

    async def result(self, timeout: float | None = None) -> SessionResult:
        """Wait until the session ends (or goes idle, for a persistent one)."""
        waiting = ("idle", *TERMINAL_STATUSES)
        await self.wait_for_status(*waiting, timeout=timeout or 3600)
        record = self.swarm.host.catalog.get_session(self.id)
        return SessionResult(record.status, record.final_text or "", record.result, record.error)

    def transcript(self) -> list[EventRecord]:
        """The stored transcript."""
        return self.swarm.host.catalog.events(self.id)

    async def cancel(self) -> list[str]:
        """Cancel the session and its sub-agents."""
        return await self.swarm.host.cancel(self.id)


class Swarm:
    """Durable sessions in this process, on a SQLite file or PostgreSQL."""

    def __init__(
        self,
        store: str | None = None,
        home: str | Path | None = None,
        tools: list[Tool] | None = None,
    ) -> None:
        if home is not None:
            os.environ[HOME_ENV] = str(home)
        if store is not None:
            os.environ[STORE_ENV] = store
        self.host = Host(load_settings(), [*default_tools(), *(tools or [])])
        self.host.launch()

    async def __aenter__(self) -> Swarm:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop this process's engine; unfinished sessions stay resumable."""
        self.host.shutdown()

    async def start(
        self,
        task: str,
        agent: AgentSpec | str,
        *,
        workdir: str | Path = ".",
        title: str | None = None,
    ) -> Session:
        """Start a session on a task; `agent` is an AgentSpec or just `provider:model`."""
        spec = AgentSpec(agent) if isinstance(agent, str) else agent
        options: dict[str, Any] = {"max_turns": spec.max_turns, "one_shot": not spec.persistent}
        if spec.budget:
            options["budget"] = spec.budget
        record = self.host.create_session(
            SessionRequest(
                task,
                spec.model,
                Path(workdir),
                mode=spec.mode,
                title=title,
                system_message=spec.system_message,
                tool_names=spec.tool_names,
                options=options,
            )
        )
        await self.host.start(record.id)
        return Session(self, record.id)

    def session(self, session_id: str) -> Session:
        """A handle on an existing session."""
        return Session(self, self.host.catalog.resolve_session_id(session_id))
