"""SIGKILL a session while a tool step runs; restart; nothing lost, nothing repeated."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import CliProcess, popen_cli

pytestmark = pytest.mark.chaos


def _script(workdir: Path) -> dict:
    # Turn 0 appends a line to counter.txt (must happen exactly once); turn 1 runs a long
    # command that leaves a marker and sleeps (killed there); turn 2 answers.
    return {
        "scenarios": [
            {
                "turns": [
                    {
                        "tool_calls": [
                            {
                                "name": "shell",
                                "arguments": {"argv": ["sh", "-c", "echo ran >> counter.txt"]},
                            }
                        ]
                    },
                    {
                        "tool_calls": [
                            {"name": "read_file", "arguments": {"path": "README.md"}},
                            {
                                "name": "shell",
                                "arguments": {
                                    "argv": ["sh", "-c", "touch started.marker; sleep 60"]
                                },
                            },
                        ]
                    },
                    {"text": "finished after the interruption"},
                ]
            }
        ]
    }


def _wait_for_marker(path: Path, proc: CliProcess, timeout: float = 90) -> None:
    """Wait for the tool step's marker; if it never comes, say what the run printed."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate(timeout=10)
            raise AssertionError(
                f"{path.name} never appeared (exit {proc.returncode}): {err[-3000:]}"
            )
        time.sleep(0.02)


@pytest.mark.parametrize("attempt", range(10))
def test_sigkill_during_tool_step(
    store: Store, sd_home: Path, workdir: Path, fake_llm, attempt: int
) -> None:
    fake_llm.set_script(_script(workdir))
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    proc = popen_cli(sd_home, "run", "go", "-m", "fake", "-C", str(workdir), "--mode", "code")
    _wait_for_marker(workdir / "started.marker", proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    requests_before = len(fake_llm.requests)
    assert requests_before == 2

    # Read the store in-process (a CLI start costs seconds; `sessions ls/show` have their
    # own tests): one session, owned by the killed worker.
    catalog = Catalog.open(store.url)
    try:
        [session] = catalog.list_sessions()
        sid = session.id
        res = run_cli(sd_home, "sessions", "resume", sid, timeout=90)
        assert res.code == 0, res.stderr
        assert res.stdout.strip() == "finished after the interruption"

        # The finished shell step of turn 0 did not run again; the interrupted one was not rerun.
        assert (workdir / "counter.txt").read_text() == "ran\n"
        # Only the last turn was asked of the model after the restart.
        assert len(fake_llm.requests) == requests_before + 1
        assert catalog.get_session(sid).status == "completed"
        events = catalog.events(sid)
        keys = [(e.kind, json.dumps(e.payload, sort_keys=True)) for e in events]
        assert len(keys) == len(set(keys)), "duplicate transcript entries"
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        results = [e.payload for e in events if e.kind == "tool_result"]
        assert [r["name"] for r in results] == ["shell", "read_file", "shell"]
        assert results[2]["content"].startswith("interrupted")
        assert catalog.usage_totals([sid]).turns == 3

        # The resuming worker claimed the killed one's work and then stopped cleanly.
        with catalog.engine.connect() as conn:
            workers = conn.execute(sa.select(schema.workers).order_by("started_at")).all()
        assert len(workers) == 2, workers
        killed, resumer = workers
        assert killed.pid == proc.pid and not killed.stopped
        assert killed.recovered_by == resumer.executor_id
        # It left no work behind, so it closed its own row: nobody takes it over.
        assert resumer.stopped and resumer.recovered_by == resumer.executor_id
    finally:
        catalog.engine.dispose()
