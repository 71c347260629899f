"""SIGKILL during a durable `wait`: the restarted session wakes at the original deadline,
not at restart time + the wait."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck.catalog.records import RESUMED_KIND
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    expect_killed,
    open_catalog,
    popen_cli,
    text,
)

pytestmark = pytest.mark.chaos

WAIT = 5.0


def test_wait_keeps_its_deadline_across_sigkill(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted(
        {"napper": Agent([calls(call("wait", seconds=WAIT, reason="nap")), text("rested")])}
    )
    fake_llm.set_script(script)
    # Killed in the wait, after its deadline was fixed, before the engine recorded a sleep.
    expect_killed(
        popen_cli(
            sd_home,
            "run",
            "napper",
            "-m",
            "fake",
            "-C",
            str(workdir),
            "-q",
            SWARMDECK_CRASH_AT="wait.sleeping",
        )
    )
    killed_at = time.time()
    catalog = open_catalog()
    (session,) = catalog.list_sessions()
    assert session.status == "waiting"
    # The deadline was fixed between the turn that asked and the last write before the kill.
    began = catalog.events(session.id, kinds=["assistant"])[0].ts
    last_write = session.updated_at

    res = run_cli(sd_home, "sessions", "resume", session.id, timeout=90)
    assert res.code == 0, res.stderr
    assert res.stdout.strip() == "rested"
    # The killed run's workflow went back on a queue as the resume took it over, and the
    # resume's own start of it found it there: DBOS's warning about that is not the user's.
    assert "already exists in queue" not in res.stderr, res.stderr
    # The transcript says the session went on in another process, after the killed one.
    [resumed] = catalog.events(session.id, kinds=[RESUMED_KIND])
    assert resumed.payload["after"] == session.executor
    assert resumed.payload["executor"] not in (None, session.executor)
    waited = catalog.events(session.id, kinds=["tool_result"])[0]
    assert waited.payload["content"] == f"waited {WAIT:g} seconds (nap)"

    # The sleep the restarted process recorded ends at the original deadline... (The wait
    # is a receive with a timeout, so a message can end it early: the engine records the
    # timeout's end as the output of its sleep record.)
    table = "dbos.operation_outputs" if store.is_postgres else "operation_outputs"
    with catalog.engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT started_at_epoch_ms, output FROM {table} "
                "WHERE workflow_uuid = :wf AND function_name = 'DBOS.sleep'"
            ),
            {"wf": session.id},
        ).all()
    if not rows:
        # The restart reached the wait after its deadline (a loaded machine): it records
        # no sleep and wakes at once, never before the deadline fixed before the kill.
        assert waited.ts >= began + WAIT - 0.002, (waited.ts - began, WAIT)
    else:
        ((recorded_at, deadline),) = rows
        recorded_at, deadline = recorded_at / 1000, float(deadline)
        # (A restart forked from the tests' CLI server can reach the wait 0.25 s after the
        # turn that asked: the kill, not a guess of the restart's cost, is the line.)
        assert recorded_at >= killed_at - 0.001, "recorded by the restarted process"
        # (Milliseconds, truncated; the engine adds the duration to its own clock reading,
        # a thread hop after ours, so its deadline may trail the fixed one by that hop.)
        assert began + WAIT - 0.002 <= deadline <= last_write + WAIT + 0.25, (
            deadline - began,
            last_write - began,
        )
        # ...and the session woke then (or at once, had the restart taken longer).
        assert max(deadline, recorded_at) <= waited.ts <= max(deadline, recorded_at) + 1.5
    assert script.asked["napper"] == 2
    assert catalog.get_session(session.id).status == "completed"
