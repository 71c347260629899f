"""SIGKILL a swarm in each phase: during decomposition (the plan answered but not stored; the
plan stored but no member spawned), during the members' work, and during aggregation. After
each kill `swarmdeck sessions resume` takes over the coordinator and its members.

Nothing is asked twice that was stored (no plan asked again once accepted, no finished
member's turn asked again), no member is spawned twice (one session per member, no retry
made up by the crash), and the swarm ends completed with every member's result.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.swarm.report import build_report
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    TurnLedger,
    call,
    calls,
    expect_killed,
    live,
    open_catalog,
    popen_cli,
    text,
    wait_for,
)
from tests.swarm.support import RESULTS, journal, member, plan_of

pytestmark = pytest.mark.chaos

PLAN = plan_of(
    {"role": "finder", "task": "FIND: where is main", "mode": "explore"},
    {"role": "judge", "task": "JUDGE: review app.py", "mode": "review"},
    {"role": "checker", "task": "CHECK: run tests", "mode": "test", "depends_on": ["finder"]},
)


def _script() -> Scripted:
    reads = (calls(call("read_file", path="app.py")), calls(call("list_dir")))
    return Scripted(
        {
            "KILLSWARM": Agent([calls(call("submit_plan", **PLAN)), text("MERGED AFTER KILLS")]),
            "FIND:": member("explore", *reads),
            "JUDGE:": member("review", *reads),
            "CHECK:": member("test", *reads),
        }
    )


def _asked_by_agent(script: Scripted) -> Counter[str]:
    counts: Counter[str] = Counter()
    for (needle, _turn), n in script.asked_turns.items():
        counts[needle] += n
    return counts


def test_a_swarm_survives_sigkill_in_every_phase(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    catalog = open_catalog()
    script = _script()
    fake_llm.set_script(script)
    ledger = TurnLedger(script, catalog, fake_llm)

    # 1. Decomposition: the model answered the plan, the process died before storing it.
    expect_killed(
        popen_cli(
            sd_home,
            "swarm",
            "KILLSWARM: look around",
            "-C",
            str(workdir),
            "-m",
            "fake",
            "-q",
            SWARMDECK_CRASH_AT="llm.after:1",
        )
    )
    ledger.killed()
    [coordinator] = [s.id for s in catalog.list_sessions(limit=10) if s.parent_id is None]
    assert "swarm:plan" not in journal(catalog, coordinator)
    steps = [
        # 2. The plan stored and accepted, no member spawned yet.
        "swarm.planned:1",
        # 3. The members at work: killed after the fourth tool call of the process.
        "tool.after:4",
        # ...and once a member's end is classified, the others still at work.
        "swarm.member_done:1",
        # 4. Aggregation: the members' results shown, the merge not asked yet.
        "swarm.aggregating:1",
    ]
    for point in steps:
        expect_killed(
            popen_cli(sd_home, "sessions", "resume", coordinator, SWARMDECK_CRASH_AT=point),
            timeout=90,
        )
        ledger.killed()
        entries = journal(catalog, coordinator)
        if point == "swarm.planned:1":
            assert "swarm:plan" in entries
            assert not any(k.startswith("swarm:spawn") for k in entries)
        if point == "tool.after:4":
            assert any(k.startswith("swarm:spawn") for k in entries)
            assert "swarm:result" not in entries
        if point == "swarm.member_done:1":
            finished = {k for k in entries if k.startswith("swarm:end")}
            assert finished and "swarm:result" not in entries
            done_before = _asked_by_agent(script)
    res = run_cli(sd_home, "sessions", "resume", coordinator, timeout=120)
    assert res.code == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "MERGED AFTER KILLS"

    doc = build_report(catalog, coordinator)
    assert doc["verdict"] == "completed"
    assert [m["result"] for m in doc["members"]] == [
        RESULTS["explore"],
        RESULTS["review"],
        RESULTS["test"],
    ]
    assert [m["attempts"] for m in doc["members"]] == [1, 1, 1]
    sessions = catalog.list_sessions(limit=100)
    # One session per member: none spawned twice, no retry made up by a crash.
    assert sorted(s.id for s in sessions) == sorted(
        [
            coordinator,
            *(f"{coordinator}.{i}-{r}" for i, r in ((1, "finder"), (2, "judge"), (3, "checker"))),
        ]
    )
    assert not live(sessions)
    entries = journal(catalog, coordinator)
    assert sorted(k for k in entries if k.startswith("swarm:spawn")) == [
        "swarm:spawn:0:0",
        "swarm:spawn:1:0",
        "swarm:spawn:2:0",
    ]
    # The plan turn is stored once; the coordinator took two turns in all.
    turns = [e.key for e in catalog.events(coordinator, kinds=["assistant"])]
    assert turns == ["turn:0", "turn:1"]
    for s in sessions:
        keys = [e.key for e in catalog.events(s.id)]
        assert len(keys) == len(set(keys))
        assert [e.kind for e in catalog.events(s.id)][:1] == ["task"]
    # A member that had finished was not run again: no request of it after that kill.
    for key in finished:
        needle = ("FIND:", "JUDGE:", "CHECK:")[int(key.split(":")[2])]
        assert _asked_by_agent(script)[needle] == done_before[needle], key
    # The plan was asked again only because the first answer died unstored; nothing else.
    ledger.check()
    assert script.asked_turns[("KILLSWARM", 0)] == 2


def _killed_while_members_work(
    sd_home: Path, workdir: Path, fake_llm
) -> tuple[Catalog, Scripted, TurnLedger, str]:
    """`swarmdeck swarm` SIGKILLed once a member's end is classified, the others at work:
    (catalog, script, ledger, the coordinator's id)."""
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    catalog = open_catalog()
    script = _script()
    fake_llm.set_script(script)
    ledger = TurnLedger(script, catalog, fake_llm)
    expect_killed(
        popen_cli(
            sd_home, "swarm", "KILLSWARM: look around", "-C", str(workdir), "-m", "fake", "-q",
            SWARMDECK_CRASH_AT="swarm.member_done:1",
        ),
        timeout=90,
    )  # fmt: skip
    ledger.killed()
    [coordinator] = [s.id for s in catalog.list_sessions(limit=10) if s.parent_id is None]
    return catalog, script, ledger, coordinator


@pytest.mark.timeout(300)  # its own waits allow more than the suite's 120 s
def test_a_worker_takes_over_a_killed_swarm_and_drives_its_coordinator(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    """The fleet: `swarmdeck swarm` dies while its members work; a worker takes over the
    dead process's sessions, the coordinator's among them, and runs the swarm to its end
    (its driver is registered in the worker: the coordinator does not fail as an unknown
    kind, nor run as a plain agent)."""
    catalog, _, ledger, coordinator = _killed_while_members_work(sd_home, workdir, fake_llm)
    assert "swarm:result" not in journal(catalog, coordinator)
    res = run_cli(sd_home, "worker", "--once", "--max-seconds", "90", timeout=150)
    assert res.code == 0, res.stderr[-3000:]
    assert "took over the sessions of" in res.stderr
    record = catalog.get_session(coordinator)
    assert (record.status, record.final_text) == ("completed", "MERGED AFTER KILLS")
    doc = build_report(catalog, coordinator)
    assert doc["verdict"] == "completed"
    assert [m["attempts"] for m in doc["members"]] == [1, 1, 1]
    assert len(catalog.list_sessions(limit=100)) == 4  # no member spawned twice
    ledger.check()


def test_a_swarm_that_failed_mid_work_resumes_as_a_new_generation(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    """The swarm's process dies while its members work, and a process without the swarm's
    driver (a bare runtime Host) takes it over: the coordinator fails, saying why. `sessions
    resume` then runs it as a new generation: the stored plan is not asked for again, the
    members whose ends the failed generation had taken are seen as ended, and the swarm
    completes with every member's result."""
    from swarmdeck.runtime.host import Host

    catalog, script, ledger, coordinator = _killed_while_members_work(sd_home, workdir, fake_llm)
    bare = Host()
    try:
        assert bare.launch().recover_dead_workers()
        wait_for(
            lambda: (
                catalog.get_session(coordinator).status == "failed"
                and not live(catalog.list_sessions(limit=100))
            ),
            timeout=90,
            what="the coordinator to fail without its driver, and its members to end",
        )
    finally:
        bare.shutdown()
    assert "no driver for sessions of kind 'swarm'" in (
        catalog.get_session(coordinator).error or ""
    )
    res = run_cli(sd_home, "sessions", "resume", coordinator, timeout=120)
    assert res.code == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "MERGED AFTER KILLS"
    record = catalog.get_session(coordinator)
    assert record.generation == 1
    doc = build_report(catalog, coordinator)
    assert doc["verdict"] == "completed"
    assert [m["attempts"] for m in doc["members"]] == [1, 1, 1]
    assert len(catalog.list_sessions(limit=100)) == 4
    assert script.asked_turns[("KILLSWARM", 0)] == 1  # the plan: once
    ledger.check()
