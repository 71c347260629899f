"""System agents end to end: `swarmdeck system start` and `swarmdeck worker` bring up the
three packaged system agents (one session each, however many workers start them at once);
`sessions tree` shows them; a person's message reaches the sweeper by its agent id; a
scripted sweeper cleans a seeded store exactly right; `system stop` stops them."""

from __future__ import annotations

import json
import time
from pathlib import Path

from swarmdeck.catalog.system_agents import SystemAgents
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import (
    finish,
    open_catalog,
    popen_cli,
    sigkill,
    wait_for,
)
from tests.plugins.support import (
    MgmtScript,
    enable_system_agents,
    fast_sweeper,
    seed,
    session_ids,
)

SYSTEM = {"sys-operator", "sys-sweeper", "sys-resourcemgr"}


def test_start_refuses_without_a_model_the_user_names(sd_home: Path) -> None:
    res = run_cli(sd_home, "system", "start")
    assert res.code == 2
    assert "model you name" in res.stderr and "--model" in res.stderr
    assert res.stderr.count("\n") == 1  # one line, no traceback
    assert SystemAgents(open_catalog().engine).rows() == []
    res = run_cli(sd_home, "system", "start", "--model", "openai")  # a paid provider, no key
    assert res.code == 2 and "no key for provider openai" in res.stderr


def test_two_workers_starting_together_make_one_session_each(
    store: Store, sd_home: Path, fake_llm
) -> None:
    script, printed = enable_system_agents(sd_home, fake_llm)
    assert "enabled sweeper as sys-sweeper under sys-operator on fake:scripted" in printed
    workers = [popen_cli(sd_home, "worker", "--once", "--max-seconds", "60") for _ in range(2)]
    for w in workers:
        code, _out, err = finish(w, timeout=120)
        assert code == 0, err
    catalog = open_catalog()
    assert session_ids(catalog) == SYSTEM
    for sid in SYSTEM:
        record = catalog.get_session(sid)
        assert record.status == "idle", (sid, record.status, record.error)
        assert len(catalog.events(sid, kinds=["assistant"])) == 1
    # Each agent's first turn was asked once: one session, one workflow, whoever started it.
    assert script.asked == {"operator": 1, "sweeper": 1, "resourcemgr": 1}
    operator = catalog.get_session("sys-operator")
    assert operator.parent_id is None
    for child in ("sys-sweeper", "sys-resourcemgr"):
        record = catalog.get_session(child)
        assert record.parent_id == "sys-operator" and record.root_id == "sys-operator"
        assert record.options["system_agent"] == child.removeprefix("sys-")
    status = json.loads(run_cli(sd_home, "system", "status", "--json").stdout)
    assert {(r["agent"], r["status"]) for r in status} == {
        ("operator", "idle"),
        ("sweeper", "idle"),
        ("resourcemgr", "idle"),
    }


def test_fleet_brings_them_up_and_a_scripted_sweeper_cleans_a_seeded_store(
    sd_home: Path, fake_llm, tmp_path: Path
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = MgmtScript({})
    fake_llm.set_script(script)
    catalog = open_catalog()
    hour = 3600.0
    runs = sd_home / "runs"
    artifacts = sd_home / "artifacts"
    (runs / "old").mkdir(parents=True)
    (runs / "old" / "run.log").write_text("x" * 1000)
    seed(catalog, "old", status="completed", ago=hour, run_dir=str(runs / "old"))
    seed(catalog, "old.kid", status="failed", ago=hour, parent="old", root="old")
    (artifacts / "old.kid").mkdir(parents=True)
    (artifacts / "old.kid" / "r.md").write_text("report")
    catalog.put_artifact("old.kid", "r.md", str(artifacts / "old.kid" / "r.md"), 6, "0" * 64)
    seed(catalog, "orphan", status="cancelled", ago=hour, parent="gone", root="gone")
    seed(catalog, "fresh", status="completed", ago=60)  # within the 5-minute grace
    seed(catalog, "busy", status="completed", ago=hour)
    seed(catalog, "busy.kid", status="running", ago=hour, parent="busy", root="busy")
    seed(catalog, "live", status="idle", ago=hour)
    seed(catalog, "sys-ghost", status="completed", ago=hour)  # system by its id
    seed(catalog, "ghost2", status="failed", ago=hour, options={"system_agent": "ghost2"})
    kept = {"fresh", "busy", "busy.kid", "live", "sys-ghost", "ghost2"}

    plugin = fast_sweeper(tmp_path / "fast")
    res = run_cli(sd_home, "system", "start", "--model", "fake", "--plugin", str(plugin))
    assert res.code == 0, res.stderr
    worker = popen_cli(sd_home, "worker")
    try:
        wait_for(lambda: session_ids(catalog) >= SYSTEM, timeout=60, what="system sessions")
        wait_for(
            lambda: session_ids(catalog) == kept | SYSTEM,
            timeout=60,
            what="the sweep of old, old.kid and orphan",
        )
        tree = run_cli(sd_home, "sessions", "tree").stdout
        for sid in SYSTEM:
            assert sid in tree
        assert tree.index("sys-operator") < tree.index("sys-sweeper")

        # Everything of the removed trees went: rows, artifact files, the run directory.
        assert not (runs / "old").exists() and not (artifacts / "old.kid").exists()
        audits = [e.payload for e in catalog.events("sys-sweeper", kinds=["audit"])]
        removed = sorted(a["session"] for a in audits if a["action"] == "cleanup_session")
        assert removed == ["old", "orphan"]
        old = next(a for a in audits if a["session"] == "old")
        assert old["sessions"] == ["old", "old.kid"] and old["bytes"] >= 1006
        assert old["why"] == "stale" and old["origin"] == "cron" and old["at"]
        audit_files = list((artifacts / "sys-sweeper").glob("audit-*.jsonl"))
        assert len(audit_files) == 1
        lines = [json.loads(x) for x in audit_files[0].read_text().splitlines()]
        assert sorted(x["session"] for x in lines) == ["old", "orphan"]

        # A person talks to the sweeper by its agent id; it answers at once.
        turns = len(catalog.events("sys-sweeper", kinds=["assistant"]))
        sent = run_cli(sd_home, "sessions", "send", "sweeper", "how is it going?")
        assert sent.code == 0 and json.loads(sent.stdout)["session_id"] == "sys-sweeper"
        wait_for(
            lambda: any(
                "you said: how is it going?" in e.payload["text"]
                for e in catalog.events("sys-sweeper", kinds=["assistant"])[turns:]
            ),
            timeout=30,
            what="the sweeper's answer",
        )
        answer = catalog.events("sys-sweeper", kinds=["assistant"])[-1]
        assert answer.payload["origin"] == "person"
        # Quiet ticks since the sweep woke no model: the sweeper was asked once per turn.
        time.sleep(1.5)
        quiet = catalog.get_session("sys-sweeper").options["cron"]["quiet_ticks"]
        assert quiet >= 2
        assert script.asked["sweeper"] == len(catalog.events("sys-sweeper", kinds=["assistant"]))

        # They survive a SIGKILL of their worker: the next one takes them over, no new
        # session, no turn asked again, the cron ticking on.
        asked = dict(script.asked)
        sigkill(worker)
        worker = popen_cli(sd_home, "worker")

        def ticks() -> int:
            return catalog.get_session("sys-sweeper").options["cron"]["quiet_ticks"]

        before = ticks()
        wait_for(lambda: ticks() >= before + 3, timeout=60, what="ticks after the takeover")
        assert session_ids(catalog) == kept | SYSTEM and script.asked == asked
    finally:
        sigkill(worker)

    stopped = run_cli(sd_home, "system", "stop")
    assert stopped.code == 0, stopped.stderr
    doc = json.loads(stopped.stdout)
    assert sorted(doc["disabled"]) == ["operator", "resourcemgr", "sweeper"]
    assert set(doc["cancelled"]) == SYSTEM
    assert all(catalog.get_session(s).status == "cancelled" for s in SYSTEM)
