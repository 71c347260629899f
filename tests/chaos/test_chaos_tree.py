"""SIGKILL between spawning a sub-agent and recording it (spawn.recorded) and while a
message is in flight (message.posted: stored in the inbox, doorbell not rung yet), for a
parent's message to its child and for the child's final update to its parent.

After each kill `swarmdeck sessions resume` (the last time `swarmdeck worker --once`) takes
over. Nothing is lost (the child hears
its parent, the parent hears its child), nothing is repeated (one child, one message each
way, no LLM turn asked again unless its answer died with a process), no orphan, nothing
left `running`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.testing.script import FakeRequest, Reply
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
    spawned_ids,
    text,
    tool_results,
    user_texts,
    wait_for,
)

pytestmark = pytest.mark.chaos


def _session(catalog: Catalog, task: str) -> str:
    return next(s.id for s in catalog.list_sessions(limit=100) if s.task == task)


def _inbox(catalog: Catalog, sid: str) -> list[tuple[str, str]]:
    inbox = schema.inbox
    with catalog.engine.connect() as conn:
        rows = conn.execute(
            sa.select(inbox.c.kind, inbox.c.msg_id).where(inbox.c.session_id == sid)
        ).all()
    return [(r.kind, r.msg_id) for r in rows]


def _script(catalog: Catalog) -> Scripted:
    def helper_acts_once_told(_req: FakeRequest) -> Reply:
        # Ordering, not timing: the helper's first answer waits for its parent's message to
        # be posted (a turn takes in what arrived before it, so it may be taken already).
        helper = _session(catalog, "helper job")
        wait_for(lambda: _inbox(catalog, helper), timeout=60)
        return calls(call("list_artifacts"))

    def helper_reports(req: FakeRequest) -> Reply:
        # ...and its final answer waits until the parent's message_agent call is stored,
        # so the child's update is the second message posted in the process that runs it.
        boss = _session(catalog, "boss job")
        wait_for(
            lambda: any(
                e.payload["name"] == "message_agent"
                for e in catalog.events(boss, kinds=["tool_result"])
            ),
            timeout=60,
        )
        return text("helper heard: " + user_texts(req)[-1])

    return Scripted(
        {
            "helper job": Agent([helper_acts_once_told, helper_reports]),
            "boss job": Agent(
                [
                    calls(call("spawn_agent", task="helper job", title="helper")),
                    lambda req: calls(
                        call("message_agent", agent_id=spawned_ids(req)[0], text="use blue")
                    ),
                    calls(call("wait_for_agents", timeout=60)),
                    lambda req: text("boss done: " + tool_results(req)[-1][:12]),
                ]
            ),
        }
    )


def test_spawn_and_messages_survive_sigkills(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    catalog = open_catalog()
    script = _script(catalog)
    fake_llm.set_script(script)
    ledger = TurnLedger(script, catalog, fake_llm)

    expect_killed(
        popen_cli(
            sd_home,
            "run",
            "boss job",
            "-m",
            "fake",
            "-C",
            str(workdir),
            "-q",
            SWARMDECK_CRASH_AT="spawn.recorded:1",
        )
    )
    ledger.killed()
    boss = _session(catalog, "boss job")
    helper = _session(catalog, "helper job")  # recorded by the step that died
    assert catalog.get_session(helper).status == "pending"
    # 1: the parent's message to the child is stored, its doorbell not rung.
    # 2: the child's update to the parent (the parent's message is posted again first).
    for point in ("message.posted:1", "message.posted:2"):
        expect_killed(popen_cli(sd_home, "sessions", "resume", boss, SWARMDECK_CRASH_AT=point))
        ledger.killed()
    # The last takeover by a worker that exits once nothing is left to do.
    res = run_cli(sd_home, "worker", "--once", timeout=90)
    assert res.code == 0, res.stderr
    assert catalog.get_session(boss).final_text == "boss done: all finished"

    sessions = catalog.list_sessions(limit=100)
    assert sorted(s.id for s in sessions) == sorted([boss, helper])  # one child, no orphan
    assert not live(sessions)
    assert {s.status for s in sessions} == {"completed"}
    assert catalog.get_session(helper).final_text == (
        f"helper heard: message from your parent {boss}: use blue"
    )
    # One message each way, although each was posted twice (the second one deduplicated).
    assert [k for k, _ in _inbox(catalog, helper)] == ["user"]
    assert [k for k, _ in _inbox(catalog, boss)] == ["child_update"]
    assert catalog.pending_count(boss) == 0 and catalog.pending_count(helper) == 0
    spawns = [
        e.payload
        for e in catalog.events(boss, kinds=["tool_result"])
        if e.payload["name"] == "spawn_agent"
    ]
    assert [s["content"] for s in spawns] == [f"started sub-agent {helper}"]
    assert [e.kind for e in catalog.events(helper)][:1] == ["task"]
    for sid in (boss, helper):
        keys = [e.key for e in catalog.events(sid)]
        assert len(keys) == len(set(keys))
    ledger.check()
