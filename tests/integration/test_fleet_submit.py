"""Submitting work to the fleet: a session handed over while workers serve the store runs on
exactly one of them; a burst spreads over all of them within their concurrency; the fleet
path and the in-process path print the same lines.

Scheduling and stopping run on both stores; the tests of what a path prints, on SQLite
only (the `store` fixture doubles a test, and each starts worker processes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck.config import load_settings
from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_fleet_support import Fleet, worker_rows
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    open_catalog,
    text,
    wait_for,
)
from tests.machine_load import stretched_by_load

pytestmark = pytest.mark.fleet

RESULT = {"facts": [{"fact": "main returns 42", "file_line": "app.py:2"}], "truncated": False}


def explore_script() -> Scripted:
    """Two turns: read a file, then submit the explore result."""
    return Scripted(
        {
            "what does main return": Agent(
                [
                    calls(call("read_file", path="app.py")),
                    calls(call("submit_result", result=RESULT)),
                ]
            )
        }
    )


def test_a_session_handed_over_runs_on_exactly_one_of_two_workers(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = explore_script()
    fake_llm.set_script(script)
    # Leases of a minute: a worker whose beat a loaded machine delays past the default 3 s
    # would be taken over by its peer (a second execution), or the dispatch's session taken
    # back by the dispatch itself.
    workers = [fleet.start(h, SWARMDECK_LEASE_SECONDS="60") for h in ("host-a", "host-b")]
    res = run_cli(
        sd_home, "dispatch", "--provider", "fake", "--mode", "explore", "--workdir",
        str(workdir), "--task", "what does main return?", timeout=120,
        SWARMDECK_LEASE_SECONDS="60",
    )  # fmt: skip
    assert res.code == 0, res.stderr
    started, verdict = (json.loads(line) for line in res.stdout.splitlines())
    assert verdict["verdict"] == "completed" and verdict["result"] == RESULT
    assert "handed to the fleet" in " ".join(res.stderr.split())
    catalog = open_catalog()
    record = catalog.get_session(started["session_id"])
    # One execution ran it (each raises the epoch), on one of the two workers, and each
    # turn was asked once.
    assert record.executor in {w.executor_id for w in workers}
    assert record.epoch == 1
    assert dict(script.asked_turns) == {
        ("what does main return", 0): 1,
        ("what does main return", 1): 1,
    }


@pytest.mark.timeout(300)  # its own waits allow more than the suite's 120 s
def test_a_hundred_sessions_spread_over_both_workers_within_their_concurrency(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    in_flight, most = 0, 0
    lock = threading.Lock()

    def slow_answer(req: FakeRequest) -> Reply:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        time.sleep(0.1)
        with lock:
            in_flight -= 1
        return text("done")

    script = Scripted({"job": Agent([slow_answer])})
    fake_llm.set_script(script)
    # Ten sessions at a time per worker: a burst must wait its turn on the queue.
    workers = [
        fleet.start(h, SWARMDECK_WORKER_CONCURRENCY="10", SWARMDECK_LEASE_SECONDS="60")
        for h in ("host-a", "host-b")
    ]
    host = Host()
    # Half one by one, half at once (one transaction, as Swarm.start_all does).
    ids = [
        host.create_session(SessionRequest(f"job {i}", "fake", workdir), fleet=True).id
        for i in range(50)
    ]
    batch = [SessionRequest(f"job {i}", "fake", workdir) for i in range(50, 100)]
    ids += [r.id for r in host.create_sessions(batch, fleet=True)]
    catalog = open_catalog()
    wait_for(
        lambda: all(catalog.get_session(i).status == "completed" for i in ids),
        timeout=180,
        what="all 100 sessions to complete",
    )
    ran_by = [catalog.get_session(i).executor for i in ids]
    counts = {w.executor_id: ran_by.count(w.executor_id) for w in workers}
    assert sum(counts.values()) == 100, counts
    assert all(n >= 10 for n in counts.values()), f"not spread over both workers: {counts}"
    assert most <= 20, f"{most} requests at once: above 2 workers x 10"
    assert script.asked["job"] == 100  # each asked once
    assert all(catalog.get_session(i).epoch == 1 for i in ids)
    rows = worker_rows(catalog)
    assert all(rows[w.executor_id].role == "worker" for w in workers)


def _normalized(stdout: str, ids: list[str]) -> str:
    """The output with what differs between any two runs (ids, times, paths) blanked."""
    for value in ids:
        stdout = stdout.replace(value, "ID")
    stdout = re.sub(r'"duration_s": ?[0-9.]+', '"duration_s": T', stdout)
    return re.sub(r"resume-\d+", "resume-N", stdout)


@pytest.mark.parametrize("command", ["dispatch", "run"])
def test_the_fleet_path_and_the_local_path_print_the_same(
    sd_home: Path, workdir: Path, fake_llm, fleet: Fleet, command: str
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(explore_script())
    argv = [
        command, "--provider", "fake", "--mode", "explore", "--workdir", str(workdir),
        "--task", "what does main return?",
    ]  # fmt: skip
    local = run_cli(sd_home, *argv, timeout=120)
    fleet.start("host-a")
    fake_llm.cache.clear()  # both paths meet a cold prompt cache, so their usage can match
    remote = run_cli(sd_home, *argv, timeout=120)
    assert (local.code, remote.code) == (0, 0), (local.stderr, remote.stderr)
    assert "in this process" in " ".join(local.stderr.split())
    assert "handed to the fleet" in " ".join(remote.stderr.split())
    catalog = open_catalog()
    sessions = catalog.list_sessions()
    assert len(sessions) == 2 and {s.executor for s in sessions} != {None}
    ids = [s.id for s in sessions]
    assert _normalized(local.stdout, ids) == _normalized(remote.stdout, ids)
    assert local.stdout.count("\n") == (2 if command == "dispatch" else 1)


def test_the_short_form_of_run_prints_the_same_on_both_paths(
    sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(
        Scripted({"say hi": Agent([calls(call("list_dir", path=".")), text("hi there")])})
    )
    local = run_cli(sd_home, "run", "say hi", "-m", "fake", "-C", str(workdir), timeout=120)
    worker = fleet.start("host-a")
    remote = run_cli(sd_home, "run", "say hi", "-m", "fake", "-C", str(workdir), timeout=120)
    assert (local.code, local.stdout) == (remote.code, remote.stdout) == (0, "hi there\n")
    newest = open_catalog().list_sessions()[0]
    assert newest.executor == worker.executor_id


def detached_explore(sd_home: Path, workdir: Path, fake_llm) -> list[str]:
    """A provider on the fake server, the explore script, and the argv of a --detach
    dispatch of its task."""
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(explore_script())
    return [
        "dispatch", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir),
        "--task", "what does main return?", "--detach",
    ]  # fmt: skip


def test_detach_hands_the_session_over_and_a_worker_runs_it(
    sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    argv = detached_explore(sd_home, workdir, fake_llm)
    # With no worker yet it waits for one: said on stderr, the started line on stdout.
    res = run_cli(sd_home, *argv, timeout=120)
    assert res.code == 0, res.stderr
    assert "no worker serves the store" in " ".join(res.stderr.split())
    [line] = res.stdout.splitlines()
    sid = json.loads(line)["session_id"]
    catalog = open_catalog()
    assert catalog.get_session(sid).status == "pending"
    worker = fleet.start("host-a")
    wait_for(lambda: catalog.get_session(sid).status == "completed", timeout=60, what="the run")
    assert catalog.get_session(sid).executor == worker.executor_id
    assert catalog.get_session(sid).result == RESULT


def test_a_worker_leaves_no_connection_pool_unclosed(
    sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    """The pools of the engine's loop (where queued sessions run) are closed on that loop
    before it stops: aiohttp reports none unclosed, whether the worker ends idle (--once)
    or on SIGTERM."""
    argv = detached_explore(sd_home, workdir, fake_llm)
    catalog = open_catalog()
    first = json.loads(run_cli(sd_home, *argv, timeout=120).stdout)["session_id"]
    res = run_cli(sd_home, "worker", "--once", "--max-seconds", "60", timeout=120)
    assert res.code == 0, res.stderr
    assert catalog.get_session(first).status == "completed"
    assert "Unclosed" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    worker = fleet.start("host-a")
    second = json.loads(run_cli(sd_home, *argv, timeout=120).stdout.splitlines()[0])
    wait_for(
        lambda: catalog.get_session(second["session_id"]).status == "completed",
        timeout=60,
        what="the run on the worker",
    )
    worker.signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=60) == 0
    assert "Unclosed" not in worker.output() and "Traceback" not in worker.output()


def test_a_hand_over_no_live_worker_takes_runs_here(
    sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    # The only worker is frozen: it looks alive when dispatch hands over, and its lease
    # lapses before it takes anything. Dispatch takes the session back and runs it itself.
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(explore_script())
    worker = fleet.start("host-a")
    fleet.freeze(worker)
    try:
        res = run_cli(
            sd_home, "dispatch", "--provider", "fake", "--mode", "explore", "--workdir",
            str(workdir), "--task", "what does main return?", timeout=120,
        )  # fmt: skip
    finally:
        worker.signal(signal.SIGCONT)
    assert res.code == 0, res.stderr
    verdict = json.loads(res.stdout.splitlines()[1])
    assert verdict["verdict"] == "completed"
    record = open_catalog().get_session(verdict["session_id"])
    assert record.executor != worker.executor_id and record.epoch == 1


async def test_the_sdk_hands_sessions_to_the_fleet_unless_they_need_its_own_tools(
    sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    from swarmdeck import Swarm, tool

    @tool(effect="read")
    def shout(text: str) -> str:
        """Say it louder."""
        return text.upper()

    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(Scripted({"greet": Agent([text("hello")])}))
    worker = await asyncio.to_thread(fleet.start, "host-a")
    async with Swarm() as swarm:
        session = await swarm.start("greet", "fake", workdir=workdir)
        assert (await session.result(timeout=60)).text == "hello"
        assert swarm.host.catalog.get_session(session.id).executor == worker.executor_id
        several = await swarm.start_all(["greet"] * 3, "fake", workdir=workdir)
        results = await asyncio.gather(*(s.result(timeout=60) for s in several))
        assert [r.text for r in results] == ["hello"] * 3
        ran_by = {swarm.host.catalog.get_session(s.id).executor for s in several}
        assert ran_by == {worker.executor_id}
    async with Swarm(tools=[shout]) as swarm:
        session = await swarm.start("greet", "fake", workdir=workdir)
        assert (await session.result(timeout=60)).text == "hello"
        record = swarm.host.catalog.get_session(session.id)
        assert record.executor == swarm.host.engine.executor_id  # run here: it has `shout`
        several = await swarm.start_all(["greet"] * 2, "fake", workdir=workdir)
        results = await asyncio.gather(*(s.result(timeout=60) for s in several))
        assert [r.text for r in results] == ["hello"] * 2
        ran_by = {swarm.host.catalog.get_session(s.id).executor for s in several}
        assert ran_by == {swarm.host.engine.executor_id}


def test_a_timeout_on_the_fleet_path_stops_the_session_on_its_worker(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(Scripted({"what does main return": Agent([Reply(text="late", delay=60)])}))
    worker = fleet.start("host-a")
    res = run_cli(
        sd_home, "dispatch", "--provider", "fake", "--mode", "explore", "--workdir",
        str(workdir), "--task", "what does main return?", "--timeout", "3", timeout=120,
    )  # fmt: skip
    assert res.code == 3, res.stderr
    verdict = json.loads(res.stdout.splitlines()[1])
    assert (verdict["verdict"], verdict["timed_out"]) == ("error", True)
    catalog = open_catalog()
    record = catalog.get_session(verdict["session_id"])
    assert record.status == "cancelled" and record.executor == worker.executor_id
    # Its worker stops the workflow (it was waiting on the model): nothing runs it.
    table = "dbos.workflow_status" if store.is_postgres else "workflow_status"

    def workflow_status() -> str:
        with catalog.engine.connect() as conn:
            return conn.execute(
                sa.text(f"SELECT status FROM {table} WHERE workflow_uuid = :wf"),
                {"wf": record.id},
            ).scalar_one()

    wait_for(lambda: workflow_status() == "CANCELLED", what="the worker to stop the workflow")


def test_a_worker_starts_what_it_takes_at_once_within_its_concurrency(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    # DBOS's queue thread would start a session only at its next poll: at 60 s, a session
    # that starts at all within the test was started by the worker's own prompt claim.
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    gate = threading.Event()

    def held(req: FakeRequest) -> Reply:
        gate.wait(30)
        return text("done")

    script = Scripted({"first job": Agent([held]), "second job": Agent([text("done")])})
    fake_llm.set_script(script)
    settings = dataclasses.replace(load_settings(), queue_poll_seconds=60.0, worker_concurrency=1)
    worker = Host(settings, role="worker")
    engine = worker.launch()
    submitter = Host()
    catalog = open_catalog()
    try:
        first = submitter.create_session(SessionRequest("first job", "fake", workdir), fleet=True)
        assert engine.take_handovers() == [first.id]
        wait_for(lambda: script.asked.get("first job") == 1, timeout=15, what="the first turn")
        # The worker runs one session at a time: the second waits on the queue.
        second = submitter.create_session(SessionRequest("second job", "fake", workdir), fleet=True)
        assert engine.take_handovers() == [second.id]
        # The claim is done when take_handovers returns: one beyond the limit would be
        # PENDING (claimed) already.
        assert asyncio.run(engine.workflow_status(second.id)) == "ENQUEUED"
        gate.set()
        wait_for(
            lambda: catalog.get_session(first.id).status == "completed",
            timeout=15,
            what="the first session to complete",
        )
        assert catalog.get_session(second.id).status == "pending"
        # Its slot free again, the next claim starts the second.
        wait_for(lambda: engine._prompt.claim_now() == 1, timeout=15, what="a free slot")
        wait_for(
            lambda: catalog.get_session(second.id).status == "completed",
            timeout=15,
            what="the second session to complete",
        )
    finally:
        gate.set()
        worker.shutdown()


def test_a_first_worker_on_a_fresh_store_serves_the_fleets_queue_at_once(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    # DBOS's queue manager looks for new queues once a second; a worker that registered
    # the fleet's queue only after launch (the queue row can exist only once launch has
    # migrated a fresh store) left its queue unserved for up to that second. A workflow
    # put on the queue as the worker says it serves the store (the way a takeover by
    # another process puts one there; no hand-over, so no prompt claim) starts at the
    # queue's first poll (0.05 s) instead.
    from dbos import DBOSClient

    from swarmdeck.runtime.engine.workflow import APP_VERSION, SESSION_WORKFLOW, SESSIONS_QUEUE

    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(Scripted({"queued job": Agent([text("done")])}))
    submitter = Host()
    # Lazy: the store has no DBOS tables until the worker's launch creates them.
    client = DBOSClient(system_database_url=store.url, lazy=True)
    try:
        # Pending and answerable to this live process: no worker starts it or takes it over.
        sid = submitter.create_session(SessionRequest("queued job", "fake", workdir)).id
        worker = fleet.start("host-a")
        enqueued_at = time.time()
        client.enqueue(
            {
                "queue_name": SESSIONS_QUEUE,
                "workflow_name": SESSION_WORKFLOW,
                "workflow_id": sid,
                "app_version": APP_VERSION,
            },
            sid,
            0,
        )
        wait_for(
            lambda: client.retrieve_workflow(sid).get_status().status != "ENQUEUED",
            timeout=10,
            what="the worker to claim the queued session",
        )
        # From the enqueue to the workflow's start (it stores its generation's start first),
        # on this machine's clock: the test's own polls do not count. (The store's created_at
        # and dequeued_at are whole seconds on SQLite, too coarse to tell 0.05 s from 1 s.)
        catalog = open_catalog()
        wait_for(lambda: catalog.get_session(sid).status == "completed", what="the session")
        with catalog.engine.connect() as conn:
            started_at = conn.execute(
                sa.text("SELECT started_at FROM sd_generations WHERE session_id = :sid"),
                {"sid": sid},
            ).scalar_one()
        claimed_after = started_at - enqueued_at
        assert catalog.get_session(sid).executor == worker.executor_id
    finally:
        client.destroy()
        submitter.shutdown()
    # Up to ~1 s at the manager's next look; at once (a queue poll) from its first. A
    # loaded machine stretches that too (a suite run claimed after 0.71 s, on the test's
    # clock).
    assert claimed_after < stretched_by_load(0.6), claimed_after


def test_a_worker_starts_the_sessions_it_takes_over_at_once(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    # A takeover puts the dead worker's sessions back on the fleet's queue; with a 60 s
    # queue poll, one running right after the takeover call was started by that call.
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(Scripted({"napper": Agent([calls(call("wait", seconds=300))])}))
    doomed = fleet.start("host-a")
    sid = Host().create_session(SessionRequest("napper", "fake", workdir), fleet=True).id
    catalog = open_catalog()
    wait_for(lambda: catalog.get_session(sid).status == "waiting", what="the wait")
    fleet.kill(doomed)
    settings = dataclasses.replace(load_settings(), queue_poll_seconds=60.0)
    worker = Host(settings, role="worker")
    engine = worker.launch()
    try:
        assert not engine.resuming()  # nothing taken over yet
        # On another host its pid says nothing here: its lease lapses first.
        claimed = wait_for(engine.recover_dead_workers, timeout=30, what="the takeover")
        assert claimed == [doomed.executor_id]
        assert asyncio.run(engine.workflow_status(sid)) == "PENDING"  # claimed, not queued
        wait_for(
            lambda: catalog.get_session(sid).executor == engine.executor_id,
            timeout=15,
            what="the session to run on the new worker",
        )
        assert not engine.resuming()  # what it took over began again
    finally:
        worker.shutdown()
