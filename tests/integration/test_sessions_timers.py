"""Timers through the SDK: a cron fires repeatedly on its schedule and never again after
cancel_cron; a rolled-over generation keeps the schedule and asks the model nothing extra."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck import AgentSpec, Swarm
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    assistant_turns,
    await_for,
    call,
    calls,
    status_is,
    text,
)

INTERVAL = 0.3


@pytest.fixture
def swarm(sd_home: Path, fake_llm) -> Iterator[Swarm]:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    s = Swarm()
    yield s
    s.close()


@pytest.mark.parametrize("rollover", [None, 2])
async def test_cron_fires_repeatedly_then_never_after_cancel(
    swarm: Swarm, fake_llm, workdir: Path, rollover: int | None
) -> None:
    script = Scripted(
        {
            "poller": Agent(
                [
                    calls(call("cron", seconds=INTERVAL, reason="poll the queue")),
                    text("cron set"),
                    text("tick 1"),
                    text("tick 2"),
                    text("tick 3"),
                    calls(call("cancel_cron")),
                    text("stopped"),
                ],
                rest="(woken again)",
            )
        }
    )
    fake_llm.set_script(script)
    options = {"rollover_iterations": rollover} if rollover else {}
    spec = AgentSpec("fake", persistent=True, options=options)
    session = await swarm.start("poller", spec, workdir=workdir)
    catalog = swarm.host.catalog
    await await_for(
        lambda: (
            [t.payload["text"] for t in assistant_turns(catalog, session.id)][-1:] == ["stopped"]
        ),
        timeout=30,
        what="the turn after cancel_cron",
    )
    await await_for(status_is(catalog, session.id, "idle"))
    # Five intervals with no cron: nothing may fire.
    await asyncio.sleep(5 * INTERVAL)

    ticks = catalog.events(session.id, kinds=["timer"])
    assert len(ticks) == 4
    assert all(t.payload["text"] == "cron tick: poll the queue" for t in ticks)
    # On its schedule, never ahead of it: tick k fires at or after (cron set) + k intervals.
    cron_set = assistant_turns(catalog, session.id)[0].ts  # the turn that called cron
    early = [t.ts - (cron_set + k * INTERVAL) for k, t in enumerate(ticks, 1)]
    assert all(e >= -0.01 for e in early), early
    texts = [t.payload["text"] for t in assistant_turns(catalog, session.id)]
    assert texts == ["", "cron set", "tick 1", "tick 2", "tick 3", "", "stopped"]
    assert script.asked["poller"] == 7  # a rollover asks nothing extra
    record = catalog.get_session(session.id)
    assert record.status == "idle" and record.options.get("cron") is None
    if rollover:
        assert record.generation >= 2


class _RecordingDurable:
    """Records the durable calls of workflow code without an engine."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, tuple[object, ...]]] = []

    async def step(self, name: str, _fn: object, *args: object) -> None:
        self.steps.append((name, args))


async def test_missed_cron_ticks_fire_once_not_one_by_one() -> None:
    from swarmdeck.runtime.session import SessionLoop

    d = _RecordingDurable()
    info = {
        "options": {"cron": {"interval": 1.0, "reason": "sweep", "next_at": 100.0}},
        "offered": [],
        "generation": 0,
        "budgeted": False,
        "rollover_iterations": 50,
        "turns_done": 1,
        "resting": False,
    }
    loop = SessionLoop(d, "s1", info)  # type: ignore[arg-type]
    await loop.tick_cron(100.2)  # on time: the next tick is one interval on
    assert loop.cron is not None and loop.cron["next_at"] == 101.0
    await loop.tick_cron(105.5)  # four ticks missed (busy or down): one fires now...
    assert loop.cron["next_at"] == 106.0  # ...and the schedule resumes, no catch-up burst
    timers = [args[1] for name, args in d.steps if name == "timer"]
    assert timers == ["cron:100.0", "cron:101.0"]


async def test_a_wait_takes_no_step_but_its_receive(
    store: Store, swarm: Swarm, fake_llm, workdir: Path
) -> None:
    """wait(s) is its receive alone (format 4): its deadline counts from when the turn that
    asked for it was journaled (a replay reads the same time back), its `waiting` status is
    stored with that turn and its `running` with its result. Its look at the inbox is taken
    only when the doorbell rings early (formats 2-3 took one before the sleep and one after,
    each a step, and two status writes). No step of its own for the clock or a status, and
    its result is journaled in the transcript alone, like any tool call's."""
    fake_llm.set_script(
        Scripted({"napper": Agent([calls(call("wait", seconds=2, reason="nap")), text("up")])})
    )
    session = await swarm.start("napper", "fake", workdir=workdir)
    catalog = swarm.host.catalog
    await await_for(status_is(catalog, session.id, "waiting"))
    assert (await session.result(timeout=30)).text == "up"
    table = "dbos.operation_outputs" if store.is_postgres else "operation_outputs"
    with catalog.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT function_name, output FROM {table} "
                "WHERE workflow_uuid = :wf ORDER BY function_id"
            ),
            {"wf": session.id},
        ).all()
    names = [r.function_name for r in rows]
    # The receive and the sleep the engine records with it (the timeout's end).
    assert names == ["DBOS.recv", "DBOS.sleep"], names
    asked = catalog.events(session.id, kinds=["assistant"])[0]
    # The deadline the engine recorded: the turn's time + 2 s. (It adds the timeout to its
    # own clock reading, a moment after ours, and keeps milliseconds, truncated.)
    recorded = float(rows[1].output)
    assert -0.002 <= recorded - (asked.ts + 2) < 0.25, (recorded, asked.ts)
    waited = catalog.events(session.id, kinds=["tool_result"])[0]
    assert waited.payload["content"] == "waited 2 seconds (nap)"
    assert waited.ts >= asked.ts + 2


WAITERS = 20


async def test_waiting_sessions_cost_the_store_one_poll_between_them(
    store: Store, swarm: Swarm, fake_llm, workdir: Path
) -> None:
    """On SQLite the engine polls for messages: one read a pass for every waiting session
    together, not one transaction each (DBOS's own poller: 20 sessions waiting 2 s were
    some 800 transactions). Each still wakes at its deadline, and a message still ends a
    wait early."""
    if store.is_postgres:
        pytest.skip("PostgreSQL wakes waiters by LISTEN/NOTIFY, without polling")
    fake_llm.set_script(
        Scripted({"napper": Agent([calls(call("wait", seconds=2, reason="nap")), text("up")])})
    )
    polls: list[float] = []

    def count(_conn, _cursor, statement: str, *_args) -> None:  # type: ignore[no-untyped-def]
        if statement.startswith("SELECT") and re.search(r"FROM (main\.)?notifications", statement):
            polls.append(1.0)

    engine = swarm.host.catalog.engine
    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        started = asyncio.get_running_loop().time()
        sessions = [await swarm.start("napper", "fake", workdir=workdir) for _ in range(WAITERS)]
        results = await asyncio.gather(*(s.result(timeout=60) for s in sessions))
        elapsed = asyncio.get_running_loop().time() - started
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)
    assert [r.text for r in results] == ["up"] * WAITERS
    for s in sessions:
        waited = swarm.host.catalog.events(s.id, kinds=["tool_result"])[0]
        assert waited.payload["content"] == "waited 2 seconds (nap)"
    passes = elapsed / swarm.host.settings.recv_poll_seconds + 10
    # A pass's read, and each receive's own look when it starts and when it consumes.
    assert len(polls) <= passes + 3 * WAITERS, (len(polls), passes)


@pytest.mark.parametrize("missed", [False, True], ids=["recent", "missed by the recent read"])
async def test_messages_wake_waiting_sessions(
    store: Store,
    swarm: Swarm,
    fake_llm,
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    missed: bool,
) -> None:
    """A message to each of several waiting sessions ends each one's wait early. On
    SQLite the poll reads the messages sent since its last pass, and every 2 s all of
    them: each read alone wakes them (one the recent read misses, as when a receive's own
    look failed before it, is found by the read of them all)."""
    if missed and store.is_postgres:
        pytest.skip("PostgreSQL wakes waiters by LISTEN/NOTIFY, without polling")
    from swarmdeck.runtime.engine import sqlite_listener

    if missed:
        # Every read but the periodic one of them all looks past every message.
        monkeypatch.setattr(sqlite_listener, "SINCE_MARGIN_MS", -(10**12))
    elif not store.is_postgres:
        # No read of them all once the one planned before this runs: the recent read alone.
        planned = sqlite_listener.EVERY_MESSAGE_SECONDS
        monkeypatch.setattr(sqlite_listener, "EVERY_MESSAGE_SECONDS", 10**9)
        await asyncio.sleep(planned + 0.2)

    def waiter(req: FakeRequest) -> Reply:
        if req.turn == 0:
            return calls(call("wait", seconds=600, reason="nap"))
        return text("answered")

    fake_llm.set_script(waiter)
    sessions = [
        await swarm.start("nap", AgentSpec("fake", persistent=True), workdir=workdir)
        for _ in range(3)
    ]
    catalog = swarm.host.catalog
    for s in sessions:
        await await_for(status_is(catalog, s.id, "waiting"))
    for s in sessions:
        await s.send("stop napping")
    for s in sessions:
        assert (await s.result(timeout=30)).text == "answered"
        (waited,) = catalog.events(s.id, kinds=["tool_result"])
        assert waited.payload["content"].startswith("wait ended early (nap)")


async def test_the_message_poll_reads_only_the_messages_not_yet_consumed(
    store: Store, swarm: Swarm
) -> None:
    """Its read goes through the partial index of unconsumed messages, so a pass costs the
    same with a thousand sessions waiting as with none (a plan change, such as the one
    DISTINCT made, would walk every message ever sent, a pass)."""
    if store.is_postgres:
        pytest.skip("PostgreSQL wakes waiters by LISTEN/NOTIFY, without polling")
    reads: list[tuple[str, object]] = []

    def seen(_conn, _cursor, statement: str, params, *_args) -> None:  # type: ignore[no-untyped-def]
        if "notifications" in statement and "created_at_epoch_ms >=" in statement:
            reads.append((statement, params))

    engine = swarm.host.catalog.engine
    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        await await_for(lambda: reads, what="a pass of the message poll")
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    statement, params = reads[0]
    with engine.connect() as conn:
        plan = " ".join(
            str(row) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params)
        )
    assert "USING INDEX sd_notifications_unconsumed" in plan, plan
