"""Fencing a paused worker: SIGSTOP it past its lease while its session waits on the model,
let another worker take the session over and finish it, SIGCONT it. The paused worker's
answer is never committed, no step runs twice, and it gives its sessions up quietly, then
serves again as a new executor."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, write_provider
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

pytestmark = [pytest.mark.chaos, pytest.mark.fleet]


def test_a_paused_worker_that_comes_back_commits_nothing_and_gives_its_sessions_up(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    answer_paused, answer_taker = threading.Event(), threading.Event()
    asked: list[int] = []

    def first_turn(_req: FakeRequest) -> Reply:
        asked.append(0)
        if len(asked) == 1:  # the paused worker's request: answered once it is frozen
            answer_paused.wait(120)
            return calls(call("shell", argv=["sh", "-c", "echo paused >> counter.txt"]))
        return calls(call("shell", argv=["sh", "-c", "echo ran >> counter.txt"]))

    def second_turn(_req: FakeRequest) -> Reply:
        asked.append(1)
        answer_taker.wait(120)  # the taker is mid-session when the paused one wakes
        return text("done")

    fake_llm.set_script(Scripted({"pauser": Agent([first_turn, second_turn])}))
    # A long lease as host-a reads the others: once restarted, it must not take over the
    # taker for a beat a loaded machine delayed (host-b judges host-a on its own 3 s).
    paused = fleet.start("host-a", SWARMDECK_LEASE_SECONDS="30")
    sid = Host().create_session(SessionRequest("pauser", "fake", workdir), fleet=True).id
    wait_for(lambda: asked == [0], what="the first turn to be asked")
    taker = fleet.start("host-b")
    fleet.freeze(paused)
    wait_for(
        lambda: asked == [0, 0, 1],
        timeout=60,
        what="the other worker to take the session over and ask its second turn",
    )
    catalog = open_catalog()
    assert catalog.get_session(sid).executor == taker.executor_id
    # The paused worker's answer arrives while it is frozen; then it wakes up, while the
    # session runs on the other worker, whose turns it could otherwise run again.
    old_id = paused.executor_id
    answer_paused.set()
    paused.signal(signal.SIGCONT)
    wait_for(
        lambda: len(paused.executor_ids()) == 2, timeout=60, what="the paused worker to restart"
    )
    answer_taker.set()
    wait_for(lambda: catalog.get_session(sid).status == "completed", timeout=60, what="the end")

    assert paused.proc.poll() is None, "it serves again"
    assert "lost its lease" in paused.output()
    assert "Traceback" not in paused.output()
    rows = worker_rows(catalog)
    assert rows[old_id].recovered_by == taker.executor_id
    assert rows[paused.executor_id].recovered_by is None and not rows[paused.executor_id].stopped
    # Nothing the paused worker did after the takeover was committed or run again: one
    # turn 0 (the taker's), one tool run, the second turn asked once, one end.
    assert asked == [0, 0, 1]
    assert (workdir / "counter.txt").read_text() == "ran\n"
    events = catalog.events(sid)
    keys = [e.key for e in events]
    assert len(keys) == len(set(keys)), keys
    [turn0] = [e for e in events if e.key == "turn:0"]
    assert "echo ran" in turn0.payload["tool_calls"][0]["arguments"]
    assert catalog.get_session(sid).final_text == "done"
