"""Seeing and sizing the fleet: `swarmdeck workers` and `status` list the live executors
with their sessions and the queue; a session nobody runs shows `orphaned`; `worker
--processes N` keeps N workers, restarts one that dies, and scales to the stored count."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from swarmdeck.catalog.supervisors import SupervisorRegistry
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.config import LEASE_ENV
from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.views.fleet import FleetView
from tests.conftest import Store, cli_env, run_cli, write_provider
from tests.integration.test_fleet_submit import explore_script
from tests.integration.test_fleet_support import Fleet
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    open_catalog,
    popen_cli,
    sigkill,
    status_is,
    text,
    wait_for,
)

pytestmark = pytest.mark.fleet


def test_workers_lists_the_fleet_its_sessions_and_the_queue(
    sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(Scripted({"chat": Agent([text("ready")], rest="ok")}))
    worker = fleet.start("host-a")
    host = Host()
    sid = host.create_session(
        SessionRequest("chat", "fake", workdir, options={"one_shot": False}), fleet=True
    ).id
    catalog = open_catalog()
    wait_for(lambda: catalog.get_session(sid).status == "idle", what="the session to rest")
    # The worker is on another host: the CLI judges it by its lease alone, which a loaded
    # machine's late beat may outlive (3 s); a long lease keeps it alive to the readers.
    long_lease = {LEASE_ENV: "600"}
    res = run_cli(sd_home, "workers", "--json", **long_lease)
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    [row] = [w for w in doc["workers"] if w["role"] == "worker"]
    assert (row["hostname"], row["executor_id"], row["pid"]) == (
        "host-a",
        worker.executor_id,
        worker.proc.pid,
    )
    assert row["sessions_running"] == 1
    assert 0 <= row["heartbeat_age_s"] < 30  # it beats (every second)
    assert (doc["queue_depth"], doc["waiting_for_a_worker"]) == (0, 0)

    table = run_cli(sd_home, "workers", **long_lease)
    assert table.code == 0, table.stderr
    assert worker.executor_id in table.stdout and "host-a" in table.stdout
    assert "queue depth: 0" in table.stdout
    status = run_cli(sd_home, "status", "--json", **long_lease)
    assert status.code == 0, status.stderr
    assert json.loads(status.stdout)["fleet"]["workers"][0]["executor_id"] == worker.executor_id


def test_a_session_whose_worker_died_shows_orphaned_until_taken_over(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(Scripted({"chat": Agent([text("ready")], rest="ok")}))
    sid = (
        Host()
        .create_session(SessionRequest("chat", "fake", workdir, options={"one_shot": False}))
        .id
    )
    runner = popen_cli(sd_home, "sessions", "resume", sid)
    catalog = open_catalog()
    try:
        wait_for(lambda: catalog.get_session(sid).status == "idle", what="the session to rest")
        listed = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
        assert [s["status"] for s in listed if s["id"] == sid] == ["idle"]
    finally:
        sigkill(runner)
    # Derived when read: the stored status is still what the session last did.
    assert catalog.get_session(sid).status == "idle"
    listed = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    assert [s["status"] for s in listed if s["id"] == sid] == ["orphaned"]
    [prefix] = [s["prefix"] for s in listed if s["id"] == sid]
    table = run_cli(sd_home, "sessions", "ls", "--status", "orphaned")
    # The table prints ids as their shortest unique prefixes, whole.
    assert prefix in table.stdout.split() and "orphaned" in table.stdout
    worker = fleet.start("host-b")
    wait_for(lambda: catalog.get_session(sid).executor == worker.executor_id, what="a takeover")
    listed = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    assert [s["status"] for s in listed if s["id"] == sid] == ["idle"]


def test_a_question_nobody_holds_needs_you_everywhere_not_orphaned(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    # Issue 30 item 19: the demo's question showed `orphaned` in `sessions ls` and "needs
    # you" in the TUI. Its answer waits in its inbox and resumes it: it is not lost.
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    ask = Agent([calls(call("ask_user", question="which branch?")), text("thanks")])
    fake_llm.set_script(Scripted({"chat": ask}))
    sid = Host().create_session(SessionRequest("chat", "fake", workdir)).id
    runner = popen_cli(sd_home, "sessions", "resume", sid)
    catalog = open_catalog()
    try:
        wait_for(status_is(catalog, sid, "input_required"), what="the question")
    finally:
        sigkill(runner)
    assert sid in WorkerRegistry(catalog.engine).orphaned([catalog.get_session(sid)])
    listed = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    [row] = [s for s in listed if s["id"] == sid]
    assert (row["status"], row["question"]) == ("input_required", "which branch?")
    shown = json.loads(run_cli(sd_home, "sessions", "show", sid, "--json").stdout)
    assert shown["status"] == "input_required"
    table = run_cli(sd_home, "sessions", "ls", "--status", "orphaned")
    assert table.code == 0 and sid[:6] not in table.stdout, table.stdout
    [tui_row] = [r for r in FleetView(catalog, WorkerRegistry(catalog.engine)).newest(50)]
    assert (tui_row.status, tui_row.needs_me, tui_row.unheld) == ("input_required", True, True)
    assert json.loads(run_cli(sd_home, "status", "--json").stdout)["sessions"] == {
        "input_required": 1
    }


def test_processes_keeps_n_workers_restarts_the_dead_and_scales(sd_home: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", "worker", "--processes", "2"],
        env=cli_env(sd_home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    catalog = open_catalog()
    registry = WorkerRegistry(catalog.engine)
    try:

        def fleet_pids() -> set[int]:
            # The supervisor's own children that serve as live workers: a row alone could
            # name a process the supervisor did not start (a restarted executor keeps its
            # pid), and a child alone may not serve yet.
            return {w.pid for w in registry.alive("worker")} & _children(proc.pid)

        def two_workers(without: int = 0) -> set[int] | None:
            # One read per poll: a predicate that read the fleet three times once passed
            # with a different set at each read (the victim's row gone between them), so
            # `second` held one pid and "scaling to 1" was true before anything scaled.
            pids = fleet_pids()
            return pids if len(pids) == 2 and without not in pids else None

        first = wait_for(two_workers, timeout=90, what="2 workers")
        [supervisor] = SupervisorRegistry(catalog.engine).rows()
        assert (supervisor.pid, supervisor.processes) == (proc.pid, 2)
        assert len({w.executor_id for w in registry.alive("worker")}) == 2
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        second = wait_for(
            lambda: two_workers(without=victim), timeout=90, what="the dead worker to be replaced"
        )
        SupervisorRegistry(catalog.engine).set_processes(supervisor.supervisor_id, 1)
        # Judged by the processes, not by live rows: on a loaded machine a row can look
        # stale for a moment, which once passed for the scale-down before it happened.
        wait_for(lambda: sum(_running(pid) for pid in second) == 1, timeout=60, what="scaling to 1")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"worker process {victim} ended (signal SIGKILL); restarting" in err, err
    assert "scaling from 2 to 1" in err, err
    wait_for(lambda: not registry.alive("worker"), timeout=30, what="its workers to stop")
    assert SupervisorRegistry(catalog.engine).rows() == []  # marked stopped


def test_a_process_that_ends_with_nothing_left_is_not_taken_over(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    """A run that finished its session closes its executor row: the next worker takes
    nothing over and says nothing. A worker stopped (SIGTERM) while its session still
    lives leaves it to be taken over, and the next worker says whose."""
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(explore_script())
    catalog = open_catalog()
    registry = WorkerRegistry(catalog.engine)
    res = run_cli(
        sd_home, "dispatch", "--provider", "fake", "--mode", "explore", "--workdir",
        str(workdir), "--task", "what does main return?", "--local", timeout=120,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    assert registry.rows() == []  # closed by itself; nothing waits for a takeover
    quiet = run_cli(sd_home, "worker", "--once", "--max-seconds", "30", timeout=120)
    assert quiet.code == 0, quiet.stderr
    assert "took over" not in quiet.stdout + quiet.stderr

    fake_llm.set_script(Scripted({"chat": Agent([text("ready")], rest="ok")}))
    worker = fleet.start("host-a")
    sid = (
        Host()
        .create_session(
            SessionRequest("chat", "fake", workdir, options={"one_shot": False}), fleet=True
        )
        .id
    )
    wait_for(lambda: catalog.get_session(sid).status == "idle", what="the session to rest")
    worker.signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=60) == 0
    [row] = registry.rows()
    assert (row.executor_id, row.stopped) == (worker.executor_id, True)
    res = run_cli(sd_home, "worker", "--once", "--max-seconds", "30", timeout=120)
    assert res.code == 0, res.stderr
    assert f"took over the sessions of {worker.executor_id}" in res.stderr


def _children(pid: int) -> set[int]:
    """The pids of a process's direct children (from any of its threads)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found.update(int(c) for c in (task / "children").read_text().split())
        except OSError:  # the thread ended as we read
            continue
    return found


def _running(pid: int) -> bool:
    """Whether a process of that pid exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
