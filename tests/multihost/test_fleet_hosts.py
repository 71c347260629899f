"""The fleet across hosts that share only PostgreSQL, on real namespaces (conftest.py):
a burst spreads over three worker hosts; a host killed or cut off mid-session is taken
over by another, the answers the cut-off host got meanwhile never reach the transcript or
the session's end, and no `once` effect runs twice; a dispatch from the planner's
repository runs on another host (its workspace kept in the store) and its branch comes
back, also when the host that ran it was killed after a step.

The tests run in order on one lab: the burst with b, c and d; then b alone holds
sessions when it is killed, and again when it is cut off.
"""

from __future__ import annotations

import json
import signal
import sys
import time

import pytest

from swarmdeck.runtime.engine.claims import PromptClaims
from tests.multihost.conftest import PLANNER_REPO, WORKDIR, LabFleet

pytestmark = [pytest.mark.multihost, pytest.mark.fleet]

BURST = 100


def host_of(report: dict) -> dict[str, str]:
    """Each session's last host."""
    return {sid: s["host"] for sid, s in report["sessions"].items()}


def test_a_burst_spreads_over_three_worker_hosts(lab_fleet: LabFleet) -> None:
    lab_fleet.start_workers("b", "c", "d")
    # Each worker counts its live peers once a second: let all three have seen the others.
    time.sleep(PromptClaims.PEERS_TTL_S)
    ids = lab_fleet.probe("submit", "burst job", str(BURST))
    report = lab_fleet.probe("wait", json.dumps(ids), "done", "60")
    assert report["ready"], "the burst did not complete within 60 s"
    assert {s["status"] for s in report["sessions"].values()} == {"completed"}
    hosts = list(host_of(report).values())
    shares = {name: hosts.count(name) for name in ("b", "c", "d")}
    assert sum(shares.values()) == BURST, shares
    assert max(shares.values()) <= 2 * min(shares.values()), f"uneven spread: {shares}"
    # Two of them stop cleanly (they hold nothing now): b alone serves the next test.
    lab_fleet.stop_worker("c")
    lab_fleet.stop_worker("d")


def effects(lab_fleet: LabFleet, host: str) -> int:
    """Lines the `once` shell command appended to the workdir on this host."""
    text = lab_fleet.host(host).read(f"{WORKDIR}/effects.log")
    return len((text or "").splitlines())


def test_a_host_killed_mid_session_is_taken_over_by_another(lab_fleet: LabFleet) -> None:
    if "b" not in lab_fleet.workers:
        lab_fleet.start_workers("b")
    [sid] = lab_fleet.probe("submit", "kill job", "1")
    # b ran the `once` step and journaled it; its next turn waits 8 s on b's model.
    mid = lab_fleet.probe("wait", json.dumps([sid]), "tool", "30")
    assert mid["ready"] and mid["sessions"][sid]["host"] == "b", mid
    lab_fleet.start_workers("c")
    killed = time.monotonic()
    lab_fleet.stop_worker("b", signal.SIGKILL)
    report = lab_fleet.probe("wait", json.dumps([sid]), "done", "30")
    took = time.monotonic() - killed
    session = report["sessions"][sid]
    assert session["status"] == "completed" and session["host"] == "c", session
    assert session["epoch"] == 2, session  # b's execution, then c's
    # The effect ran once, on b; c replayed its journaled result and ran nothing again.
    assert len(session["tool_results"]) == 1, session["tool_results"]
    assert (effects(lab_fleet, "b"), effects(lab_fleet, "c")) == (1, 0)  # a fresh workdir
    assert took < 20, f"takeover took {took:.1f} s"


def test_a_host_cut_off_is_taken_over_and_its_late_answers_land_nowhere(
    lab_fleet: LabFleet,
) -> None:
    for name in [n for n in ("c", "d") if n in lab_fleet.workers]:
        lab_fleet.stop_worker(name)
    if "b" not in lab_fleet.workers:
        lab_fleet.start_workers("b")
    before = (effects(lab_fleet, "b"), effects(lab_fleet, "c"))
    ids = lab_fleet.probe("submit", "cut job", "2")
    mid = lab_fleet.probe("wait", json.dumps(ids), "tool", "30")
    assert mid["ready"] and set(host_of(mid).values()) == {"b"}, mid
    # b's next turns answer 8 s after its `once` steps. It is cut off at once (its
    # connections wait on the network); c starts and takes the sessions over when b's
    # lease lapses.
    cut = time.monotonic()
    lab_fleet.lab.link("b", up=False)
    lab_fleet.start_workers("c")
    report = lab_fleet.probe("wait", json.dumps(ids), "done", "30")
    assert report["ready"], report
    time.sleep(max(0.0, cut + 7.0 - time.monotonic()))
    lab_fleet.lab.link("b", up=True)
    # Back on the network, b finds its lease lost and starts again as a new worker; what it
    # still had in flight (its answers came while it was cut off) lands nowhere.
    deadline = time.monotonic() + 30
    while "lost its lease" not in lab_fleet.log("b"):
        assert time.monotonic() < deadline, lab_fleet.log("b")[-2000:]
        time.sleep(0.1)
    time.sleep(1.0)  # b's writes in flight when the link came back have landed or failed
    after = lab_fleet.probe("sessions", *ids)
    for session in after.values():
        assert session["status"] == "completed" and session["host"] == "c", session
        assert session["epoch"] == 2, session
        assert len(session["tool_results"]) == 1, session
        assert "late from b" not in json.dumps(session), session
    # Each session's effect ran once, on b; c ran none of them again.
    assert (effects(lab_fleet, "b"), effects(lab_fleet, "c")) == (before[0] + 2, before[1])


def git(lab_fleet: LabFleet, *args: str) -> str:
    """A git command in the planner's repository; its output."""
    return lab_fleet.host("planner").run(["git", "-C", PLANNER_REPO, *args]).stdout


def dispatch_argv(task: str) -> list[str]:
    """A code-mode dispatch in the planner's repository."""
    return [
        sys.executable, "-m", "swarmdeck", "dispatch", "--provider", "fake", "--mode", "code",
        "--workdir", PLANNER_REPO, "--task", task,
    ]  # fmt: skip


def delivered(lab_fleet: LabFleet) -> dict[str, str]:
    """The branches swarmdeck delivered to the planner's repo, with their app.py."""
    names = git(lab_fleet, "branch", "--list", "swarmdeck/*", "--format=%(refname:short)")
    return {b: git(lab_fleet, "show", f"{b}:app.py") for b in names.split()}


def only_b_serves(lab_fleet: LabFleet) -> None:
    """Stop every worker but b's (started if it is not running)."""
    for name in [n for n in ("c", "d") if n in lab_fleet.workers]:
        lab_fleet.stop_worker(name)
    if "b" not in lab_fleet.workers:
        lab_fleet.start_workers("b")


def test_a_dispatch_from_the_planner_runs_on_b_and_its_branch_comes_back(
    lab_fleet: LabFleet,
) -> None:
    only_b_serves(lab_fleet)
    before = delivered(lab_fleet)
    out = lab_fleet.host("planner").run(dispatch_argv("deliver job: make main return 42"))
    started, verdict = (json.loads(line) for line in out.stdout.splitlines()[-2:])
    assert verdict["verdict"] == "completed", verdict
    report = lab_fleet.probe("sessions", started["session_id"])
    assert report[started["session_id"]]["host"] == "b", report
    new = {b: text for b, text in delivered(lab_fleet).items() if b not in before}
    assert len(new) == 1 and "return 42" in next(iter(new.values())), new
    # The planner's own checkout is untouched: the change is on the branch.
    assert "return 41" in git(lab_fleet, "show", "HEAD:app.py")


def test_a_takeover_restores_the_files_as_of_the_last_journaled_step(
    lab_fleet: LabFleet,
) -> None:
    only_b_serves(lab_fleet)
    before = delivered(lab_fleet)
    planner = lab_fleet.host("planner")
    proc = planner.popen(
        dispatch_argv("restore job: make main return 43"), lab_fleet.logs / "restore.log"
    )
    # b wrote app.py and journaled the step; its next turn waits 8 s on b's model.
    wait_until_tool = (
        "import json, sys; from tests.multihost.probe import catalog; "
        "print(json.dumps([s.id for s in catalog().list_sessions() if 'restore job' in s.task]))"
    )
    deadline = time.monotonic() + 30
    ids: list[str] = []
    while not ids:
        assert time.monotonic() < deadline, "the restore dispatch never started"
        ids = json.loads(planner.run([sys.executable, "-c", wait_until_tool]).stdout)
    mid = lab_fleet.probe("wait", json.dumps(ids), "tool", "30")
    assert mid["ready"] and host_of(mid) == {ids[0]: "b"}, mid
    lab_fleet.start_workers("c")
    lab_fleet.stop_worker("b", signal.SIGKILL)
    assert proc.wait(timeout=60) == 0, (lab_fleet.logs / "restore.log").read_text()
    report = lab_fleet.probe("sessions", *ids)
    assert report[ids[0]]["host"] == "c" and report[ids[0]]["epoch"] == 2, report
    new = {b: text for b, text in delivered(lab_fleet).items() if b not in before}
    # c never wrote app.py: what the branch holds is b's step, restored from the store.
    assert len(new) == 1 and "return 43" in next(iter(new.values())), new
