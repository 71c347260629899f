"""Fencing in the catalog: an execution of a session's workflow writes under the epoch it
claimed; once another execution claimed the session, the first one's journaled writes
(transcript entries, its end, `once` marks, its row) raise Fenced and land nothing."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck import Swarm
from swarmdeck.catalog import fence
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.fence import Fenced
from tests.conftest import Store, write_provider
from tests.integration.test_sessions_support import Agent, Scripted, await_for, call, calls


@pytest.fixture
def catalog(store: Store):
    cat = Catalog.open(store.url)
    cat.create_session(
        session_id="s", model="m", mode="agent", workdir="/", run_dir="/", task="t", executor="a"
    )
    cat.create_session(
        session_id="other", model="m", mode="agent", workdir="/", run_dir="/", task="t"
    )
    yield cat
    cat.engine.dispose()


def in_context(fn, *args, **kwargs):
    """Run fn in a context of its own (as each workflow execution has)."""
    return contextvars.copy_context().run(fn, *args, **kwargs)


def test_the_execution_that_claimed_last_writes_and_the_one_before_is_fenced(
    catalog: Catalog,
) -> None:
    first, _ = catalog.open_run("s", "worker-a")
    second, before = catalog.claim_run("s", "worker-b")  # a takeover
    assert (first.epoch, second, before) == (1, 2, "worker-a")
    assert catalog.get_session("s").executor == "worker-b"

    def stale(fn, *args, **kwargs):
        fence.enter("s", first.epoch)
        return fn(*args, **kwargs)

    def current(fn, *args, **kwargs):
        fence.enter("s", second)
        return fn(*args, **kwargs)

    writes = [
        (catalog.append_event, ("s", "turn:0", "assistant", {"text": "hi", "tool_calls": []})),
        (catalog.mark_tool_started, ("s", "0:call-1")),
        (catalog.update_session, ("s",), {"result": {"ok": True}}),
        (catalog.end_session, ("s", "end:g0", {"status": "completed"}), {"status": "completed"}),
    ]
    for fn, args, *kw in writes:
        with pytest.raises(Fenced):
            in_context(stale, fn, *args, **(kw[0] if kw else {}))
    record = catalog.get_session("s")
    assert (record.status, record.result) == ("running", None)
    assert [e.key for e in catalog.events("s")] == ["task"]
    # The execution that claimed last writes them all.
    for fn, args, *kw in writes:
        in_context(current, fn, *args, **(kw[0] if kw else {}))
    record = catalog.get_session("s")
    assert (record.status, record.result) == ("completed", {"ok": True})
    assert [e.key for e in catalog.events("s")] == ["task", "turn:0", "end:g0"]
    # A stored key is still a no-op for the current one, and still fenced for the stale one.
    assert (
        in_context(current, catalog.append_event, "s", "turn:0", "assistant", {"text": "x"})
        is False
    )
    assert in_context(current, catalog.mark_tool_started, "s", "0:call-1") is False
    with pytest.raises(Fenced):
        in_context(stale, catalog.mark_tool_started, "s", "0:call-1")


def test_a_turn_with_its_usage_and_status_lands_whole_or_not_at_all(catalog: Catalog) -> None:
    first, _ = catalog.open_run("s", "worker-a")
    second, _ = catalog.claim_run("s", "worker-b")
    usage = {"turn": 0, "provider": "fake", "model": "m", "cost_usd": 0.25, "input": 7}

    def turn(epoch: int) -> bool:
        fence.enter("s", epoch)
        return catalog.append_event(
            "s", "turn:0", "assistant", {"text": "hi"}, usage, status="idle"
        )

    with pytest.raises(Fenced):
        in_context(turn, first.epoch)
    # The stale execution's entry, usage row and status are all taken back.
    assert [e.key for e in catalog.events("s")] == ["task"]
    assert catalog.usage_totals(["s"]).turns == 0
    assert catalog.get_session("s").status == "running"
    statements: list[str] = []
    sa.event.listen(
        catalog.engine, "before_cursor_execute", lambda *a: statements.append(a[2].split()[0])
    )
    assert in_context(turn, second)
    # On PostgreSQL the three are one statement (the usage and the status ride in the
    # entry's INSERT); SQLite writes them one by one.
    assert len(statements) == (3 if catalog.is_sqlite else 1), statements
    totals = catalog.usage_totals(["s"])
    assert (totals.turns, totals.input, totals.output, totals.cost_usd) == (1, 7, 0, 0.25)
    assert [e.key for e in catalog.events("s")] == ["task", "turn:0"]
    assert catalog.get_session("s").status == "idle"
    # A rerun stores nothing twice.
    assert in_context(turn, second) is False
    assert catalog.usage_totals(["s"]).turns == 1


def test_a_fence_covers_its_own_session_only(catalog: Catalog) -> None:
    # A parent's execution cancels its child, or posts to it: those writes are not the
    # parent's journal, and no stale epoch of the parent stops them.
    fence.enter("s", 999)
    try:
        assert catalog.append_event("other", "inbox:m1", "user", {"text": "from s"})
        assert catalog.end_session("other", "end:g0", {"status": "cancelled"}, status="cancelled")
    finally:
        fence.enter("", 0)
    assert catalog.get_session("other").status == "cancelled"


async def test_the_epoch_follows_an_execution_into_its_worker_threads(catalog: Catalog) -> None:
    record, _ = catalog.open_run("s", "worker-a")

    async def execution(epoch: int) -> bool:
        fence.enter("s", epoch)
        return await asyncio.to_thread(
            catalog.append_event, "s", f"turn:{epoch}", "assistant", {"text": ""}
        )

    assert await asyncio.create_task(execution(record.epoch))
    catalog.claim_run("s", "worker-b")
    with pytest.raises(Fenced):
        await asyncio.create_task(execution(record.epoch))


async def test_an_execution_taken_over_mid_turn_stops_without_committing_it(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    # The engine still owns the workflow here: only the catalog's fence stops it.
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    answer = threading.Event()

    def first_turn(_req):
        answer.wait(60)
        return calls(call("shell", argv=["sh", "-c", "echo ran >> counter.txt"]))

    script = Scripted({"fenced": Agent([first_turn])})
    fake_llm.set_script(script)
    async with Swarm(local=True) as swarm:
        session = await swarm.start("fenced", "fake", workdir=workdir)
        await await_for(lambda: script.asked.get("fenced") == 1, what="the first turn")
        catalog = swarm.host.catalog
        catalog.claim_run(session.id, "another-worker")  # a takeover, as far as the catalog knows
        answer.set()
        engine = swarm.host.engine
        assert engine is not None
        # The execution returns (superseded) at its first write after the claim.
        for _ in range(600):
            if await engine.workflow_status(session.id) == "SUCCESS":
                break
            await asyncio.sleep(0.05)
        assert await engine.workflow_status(session.id) == "SUCCESS"
        record = catalog.get_session(session.id)
        assert (record.status, record.executor) == ("running", "another-worker")
        assert [e.key for e in catalog.events(session.id)] == ["task"]
        assert not (workdir / "counter.txt").exists()
        assert script.asked["fenced"] == 1
