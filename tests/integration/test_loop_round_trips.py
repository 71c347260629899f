"""On PostgreSQL no database round trip runs on the event loop while sessions work.

Every session of a process shares one event loop; a statement sent to PostgreSQL from it
holds up every other session for a network round trip (issue 35: many sessions per
worker, the loop's lag bounded). Each statement run while this thread's loop runs is
recorded with the swarmdeck frames that sent it, through a session's life: turns, a
durable wait, the blackboard, artifacts, a sub-agent, a message to a resting session, and
the SDK calls that wait on them. Starting and stopping the host (once per process) may
block; nothing else may.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from swarmdeck import AgentSpec, Swarm
from swarmdeck.runtime.host import Host
from swarmdeck.runtime.system_agents import keep_system_agents
from tests.conftest import Store, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    text,
)
from tests.plugins.support import enable_system_agents

# Once per process, where blocking is what a caller expects of them.
ONCE_PER_PROCESS = ("host.launch", "host.shutdown", "host.__init__", "sdk.__init__")
SYSTEM_SESSIONS = ("sys-operator", "sys-sweeper", "sys-resourcemgr")


def _sender() -> str:
    """The swarmdeck frames (innermost first) that sent the statement."""
    frame, names = sys._getframe(2), []
    while frame is not None:
        path = frame.f_code.co_filename
        if "/src/swarmdeck/" in path:
            names.append(f"{Path(path).stem}.{frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(names)


@contextmanager
def round_trips_on_the_loop() -> Iterator[list[str]]:
    """Statements swarmdeck sends to PostgreSQL from a thread whose event loop runs."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if conn.engine.dialect.name != "postgresql" or asyncio._get_running_loop() is None:
            return
        sender = _sender()
        if sender and not any(f"{once} " in f"{sender} " for once in ONCE_PER_PROCESS):
            seen.append(f"{' '.join(statement.split()[:3])} <- {sender}")

    event.listen(sa.Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(sa.Engine, "before_cursor_execute", record)


def _script() -> Scripted:
    parent = Agent(
        [
            calls(
                call("memory_set", key="plan", value={"step": 1}),
                call("memory_get", key="plan"),
                call("memory_list"),
                call("write_artifact", name="notes.md", content="kept"),
            ),
            calls(call("read_artifact", name="notes.md"), call("list_artifacts")),
            calls(call("spawn_agent", task="CHILD: say hi")),
            calls(call("wait_for_agents", timeout=60)),
            calls(call("wait", seconds=0.3)),
            text("ready"),
        ],
        rest="answered",
    )
    return Scripted({"PARENT": parent, "CHILD": Agent([text("hi")])})


@pytest.mark.postgres
@pytest.mark.parametrize("store", ["postgres"], indirect=True)
async def test_a_session_s_life_sends_nothing_to_postgresql_from_the_event_loop(
    store: Store, sd_home: Path, fake_llm: Any, workdir: Path
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = _script()
    fake_llm.set_script(script)
    tools = [
        *("memory_get", "memory_set", "memory_list", "write_artifact", "read_artifact"),
        *("list_artifacts", "spawn_agent", "wait_for_agents", "wait"),
    ]
    spec = AgentSpec("fake", tool_names=tools, persistent=True)
    async with Swarm(local=True) as swarm:
        with round_trips_on_the_loop() as seen:
            session = await swarm.start("PARENT: work", spec, workdir=workdir)
            assert (await session.result(timeout=60)).text == "ready"
            await session.send("one more thing")
            assert (await session.result(timeout=60)).text == "answered"
            await session.wait_for_status("idle")
    results = [e.payload for e in swarm.host.catalog.events(session.id, kinds=["tool_result"])]
    assert [r["name"] for r in results if r["is_error"]] == [], results
    assert script.asked.get("CHILD") == 1
    assert seen == [], "\n".join(seen)


@pytest.mark.postgres
@pytest.mark.parametrize("store", ["postgres"], indirect=True)
async def test_a_worker_keeping_its_system_agents_sends_nothing_from_the_event_loop(
    store: Store, sd_home: Path, fake_llm: Any
) -> None:
    enable_system_agents(sd_home, fake_llm)
    host = Host()
    host.launch()
    try:
        with round_trips_on_the_loop() as seen:
            # Once to create and start them, then as each later cycle finds them running.
            started = await keep_system_agents(host)
            await _resting(host, SYSTEM_SESSIONS)
            again = await keep_system_agents(host)
    finally:
        await host.aclose()
    assert sorted(started) == sorted(f"started {sid}" for sid in SYSTEM_SESSIONS)
    assert again == []
    assert seen == [], "\n".join(seen)


async def _resting(host: Host, ids: tuple[str, ...], timeout: float = 60) -> None:
    """Wait until these sessions rest, reading in a thread (a read here would count)."""
    deadline = time.monotonic() + timeout
    while True:
        records = await asyncio.to_thread(lambda: [host.catalog.get_session(i) for i in ids])
        if all(r.status == "idle" for r in records):
            return
        assert time.monotonic() < deadline, [(r.id, r.status) for r in records]
        await asyncio.sleep(0.05)
