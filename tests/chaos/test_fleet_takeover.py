"""Takeover across hosts: SIGKILL a worker whose sessions are in a tool step, an LLM step and
a wait; the workers on other hosts take them over within the goal, and nothing is lost or
repeated. And a run killed right after writing its session leaves nothing that no worker
runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from swarmdeck.catalog.records import RESUMED_KIND
from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_fleet_support import Fleet, worker_rows
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    TurnLedger,
    call,
    calls,
    expect_killed,
    open_catalog,
    popen_cli,
    text,
    wait_for,
)
from tests.machine_load import stretched_by_load

pytestmark = [pytest.mark.chaos, pytest.mark.fleet]

# From SIGKILL to the first step the taken-over sessions run (issue 17), on a quiet machine
# (tests/machine_load.py: bench/failover.py measures the goal itself).
TAKEOVER_GOAL_S = 5.0


NAP_S = 20.0


def test_workers_on_other_hosts_take_over_a_killed_ones_sessions(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    gate = threading.Event()

    def slow_thought(_req: FakeRequest) -> Reply:
        gate.wait(120)  # in flight when its worker dies
        return text("thinker done")

    shell = "echo ran >> counter.txt; touch started.marker; sleep 60"
    script = Scripted(
        {
            "tooler": Agent([calls(call("shell", argv=["sh", "-c", shell])), text("tooler done")]),
            "thinker": Agent([calls(call("list_dir", path=".")), slow_thought]),
            "napper": Agent([calls(call("wait", seconds=NAP_S)), text("napper done")]),
        }
    )
    fake_llm.set_script(script)
    doomed = fleet.start("host-a")
    host = Host()
    ids = {
        name: host.create_session(SessionRequest(name, "fake", workdir), fleet=True).id
        for name in script.agents
    }
    catalog = open_catalog()
    wait_for(lambda: (workdir / "started.marker").exists(), what="the tool step")
    wait_for(lambda: script.asked_turns[("thinker", 1)] == 1, what="the LLM step")
    wait_for(lambda: catalog.get_session(ids["napper"]).status == "waiting", what="the wait")
    assert {catalog.get_session(i).executor for i in ids.values()} == {doomed.executor_id}
    nap_began = catalog.events(ids["napper"], kinds=["assistant"])[0].ts
    others = [fleet.start("host-b"), fleet.start("host-c")]
    ledger = TurnLedger(script, catalog)

    killed_at, killed_mono = time.time(), time.monotonic()
    fleet.kill(doomed)
    ledger.killed()

    def taken_over() -> bool:
        return all(catalog.get_session(i).executor != doomed.executor_id for i in ids.values())

    wait_for(taken_over, timeout=30, what="the three sessions to be taken over")
    wait_for(lambda: script.asked_turns[("thinker", 1)] == 2, timeout=30, what="the re-asked turn")
    rethought = max(r.timestamp for r in fake_llm.requests if "thinker" in str(r.body))
    gate.set()
    for name, sid in ids.items():
        wait_for(
            lambda sid=sid: catalog.get_session(sid).status == "completed",
            timeout=60,
            what=f"{name} to complete",
        )

    # The first step each ran after the kill, on the new worker, came within the goal.
    interrupted = catalog.events(ids["tooler"], kinds=["tool_result"])[0]
    assert interrupted.payload["content"].startswith("interrupted")
    bound = stretched_by_load(TAKEOVER_GOAL_S)
    assert interrupted.ts - killed_at <= bound
    assert rethought - killed_mono <= bound
    napper = catalog.get_session(ids["napper"])
    # Nothing lost, nothing repeated: the `once` tool ran once, only the turn in flight at
    # the kill was asked again, the wait kept its deadline.
    assert (workdir / "counter.txt").read_text() == "ran\n"
    ledger.check()
    woke = catalog.events(ids["napper"], kinds=["assistant"])[1].ts
    assert nap_began + NAP_S - 0.5 <= woke <= nap_began + NAP_S + bound
    assert napper.final_text == "napper done"
    for sid in ids.values():
        keys = [e.key for e in catalog.events(sid)]
        assert len(keys) == len(set(keys)), keys
        assert catalog.get_session(sid).executor in {w.executor_id for w in others}
    rows = worker_rows(catalog)
    assert rows[doomed.executor_id].recovered_by in {w.executor_id for w in others}
    # Each transcript says where its session went on, and after which worker.
    for sid in ids.values():
        [resumed] = catalog.events(sid, kinds=[RESUMED_KIND])
        assert resumed.payload["after"] == doomed.executor_id
        assert resumed.payload["executor"] == catalog.get_session(sid).executor
        assert resumed.ts - killed_at <= bound
    shown = run_cli(sd_home, "sessions", "show", ids["napper"])
    said = f"resumed on {napper.executor}, after its run on {doomed.executor_id} stopped"
    assert said in " ".join(shown.stdout.split())  # as one line, however the terminal wraps it


def test_a_run_killed_right_after_writing_its_session_is_run_by_a_worker(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    # Issue 11, item 6: the session is written, pending, and its process dies before
    # starting it; a worker taking over the dead process starts it.
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(Scripted({"orphan": Agent([text("ran anyway")])}))
    expect_killed(
        popen_cli(
            sd_home, "run", "orphan", "-m", "fake", "-C", str(workdir), "--local",
            SWARMDECK_CRASH_AT="session.created",
        )
    )  # fmt: skip
    catalog = open_catalog()
    (session,) = catalog.list_sessions()
    assert session.status == "pending" and session.executor is not None
    res = run_cli(sd_home, "worker", "--once", "--max-seconds", "60", timeout=120)
    assert res.code == 0, res.stderr
    assert "took over the sessions of" in res.stderr
    record = catalog.get_session(session.id)
    assert (record.status, record.final_text) == ("completed", "ran anyway")
