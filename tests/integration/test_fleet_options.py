"""A run handed to the fleet honours every option of `run` and `dispatch`: the limits
(--max-turns, --max-tokens, --max-children, --timeout in both forms) and --no-sandbox; and
its started line and verdict name the sandbox the worker's tools run in, not this
process's. One worker serves all of them (SQLite: each test starts worker processes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from swarmdeck.testing.fake_llm import FakeLLM
from tests.conftest import CliResult, run_cli, write_provider
from tests.integration.test_cli_limits import SCRIPT as LIMITS_SCRIPT
from tests.integration.test_fleet_support import Fleet, WorkerProc
from tests.integration.test_sessions_support import open_catalog, wait_for

pytestmark = pytest.mark.fleet

# The limit tests' scenarios, and one that answers at once.
SCRIPT = {"scenarios": [*LIMITS_SCRIPT["scenarios"], {"match": "HELLO", "turns": [{"text": "hi"}]}]}
# The worker's own sandbox setting: only a worker started with it can explain "none" so.
WORKER_SANDBOX = "disabled by SWARMDECK_SANDBOX=off"


@pytest.fixture
def fake(sd_home: Path) -> Any:
    with FakeLLM(SCRIPT) as server:
        write_provider(sd_home, "fake", server.openai_base_url)
        yield server


@pytest.fixture
def worker(fleet: Fleet) -> WorkerProc:
    return fleet.start("host-a", SWARMDECK_SANDBOX="off")


def _lines(res: CliResult) -> list[dict[str, Any]]:
    return [json.loads(line) for line in res.stdout.splitlines()]


def _ran_on(worker: WorkerProc, session_id: str) -> bool:
    return open_catalog().get_session(session_id).executor == worker.executor_id


def test_the_limits_of_run_and_dispatch_hold_on_a_worker(
    sd_home: Path, workdir: Path, fake: FakeLLM, worker: WorkerProc
) -> None:
    base = ["dispatch", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir)]
    tokens = run_cli(sd_home, *base, "--task", "LOOP b", "--max-tokens", "1", timeout=120)
    assert tokens.code == 3, tokens.stderr
    started, verdict = _lines(tokens)
    assert (verdict["verdict"], verdict["reason"], verdict["steps"]) == (
        "budget_exhausted",
        "budget",
        1,
    )
    assert _ran_on(worker, started["session_id"])

    turns = run_cli(sd_home, "run", "LOOP z", "-m", "fake", "-C", str(workdir), "--max-turns", "2")
    assert turns.code == 3, turns.stderr
    assert "stopped at the step cap: 2 turns" in turns.stderr
    catalog = open_catalog()
    [capped] = [s for s in catalog.list_sessions() if s.task == "LOOP z"]
    assert capped.executor == worker.executor_id

    children = run_cli(
        sd_home, "run", "SPAWN one", "-m", "fake", "-C", str(workdir), "--max-children", "0"
    )
    assert children.code == 0, children.stderr
    [parent] = [s for s in catalog.list_sessions() if s.task == "SPAWN one"]
    assert parent.executor == worker.executor_id
    results = [e for e in catalog.events(parent.id) if e.kind == "tool_result"]
    assert "child limit: at most 0 live sub-agents" in results[0].payload["content"]


def test_a_short_form_timeout_stops_the_session_on_its_worker(
    sd_home: Path, workdir: Path, fake: FakeLLM, worker: WorkerProc
) -> None:
    res = run_cli(sd_home, "run", "HANG on", "-m", "fake", "-C", str(workdir), "--timeout", "2")
    assert res.code == 124, res.stderr
    assert "timed out after 2s" in res.stderr and "Traceback" not in res.stderr
    catalog = open_catalog()
    [record] = catalog.list_sessions()
    assert record.status == "cancelled" and record.executor == worker.executor_id

    def workflow_status() -> str:
        with catalog.engine.connect() as conn:
            return conn.execute(
                sa.text("SELECT status FROM workflow_status WHERE workflow_uuid = :wf"),
                {"wf": record.id},
            ).scalar_one()

    wait_for(lambda: workflow_status() == "CANCELLED", what="the worker to stop the workflow")


def test_started_and_verdict_name_the_sandbox_of_the_worker(
    sd_home: Path, workdir: Path, fake: FakeLLM, worker: WorkerProc
) -> None:
    base = ["dispatch", "--provider", "fake", "--workdir", str(workdir), "--task", "HELLO"]
    res = run_cli(sd_home, *base, "--mode", "explore", timeout=120)
    assert res.code in (0, 3), res.stderr
    started, verdict = _lines(res)
    assert _ran_on(worker, started["session_id"])
    assert started["sandbox"] == verdict["sandbox"] == "none"
    # The warning gives the worker's reason: this process has no SWARMDECK_SANDBOX set.
    assert WORKER_SANDBOX in " ".join(res.stderr.split())
    assert "read-only run has no shell tool" in " ".join(res.stderr.split())

    opted = run_cli(sd_home, *base, "--mode", "code", "--no-sandbox", timeout=120)
    started, verdict = _lines(opted)
    assert _ran_on(worker, started["session_id"])
    assert started["sandbox"] == verdict["sandbox"] == "none"
    assert "may read and write outside the workdir, as you asked" in " ".join(opted.stderr.split())
    assert open_catalog().get_session(started["session_id"]).options["no_sandbox"] is True
