"""Members and the coordinator talk through the session inbox: message_agent to a peer or
the coordinator, broadcast to every other member; and share the swarm's blackboard."""

from __future__ import annotations

import json
import re
from pathlib import Path

from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    open_catalog,
    text,
    wait_for,
)
from tests.swarm.support import RESULTS, plan_of, prompt_of, swarm_json, tool_texts, user_texts

PLAN = plan_of(
    {"role": "talker", "task": "TALK: share what you find", "mode": "explore"},
    {"role": "listener", "task": "LISTEN: use what others find", "mode": "explore"},
    # Starts after the talker's broadcast, and hears it all the same.
    {"role": "latecomer", "task": "LATE: catch up", "mode": "explore", "depends_on": ["talker"]},
)
COORDINATOR_RE = re.compile(r"the swarm that (\S+) coordinates")


def _coordinator_of(req: FakeRequest) -> str:
    match = COORDINATOR_RE.search(prompt_of(req))
    assert match, "a member's prompt names its coordinator"
    return match.group(1)


def test_messages_broadcasts_and_the_blackboard(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    catalog = open_catalog()
    seen: dict[str, object] = {}

    def talker_shares(req: FakeRequest) -> Reply:
        boss = _coordinator_of(req)
        # Ordering, not timing: the listener exists before the talker broadcasts.
        wait_for(lambda: any("LISTEN:" in s.task for s in catalog.list_sessions()), timeout=60)
        return calls(
            call("memory_set", key="finding", value={"main": "app.py:1"}, expected_version=0),
            call("broadcast", text="main is in app.py"),
            call("message_agent", agent_id=boss, text="note for the coordinator"),
            call("message_agent", agent_id="nobody-at-all", text="lost?"),
        )

    def talker_checks(req: FakeRequest) -> Reply:
        seen["talker_results"] = tool_texts(req)[-4:]
        return calls(call("submit_result", result=RESULTS["explore"]))

    def listener_waits(req: FakeRequest) -> Reply:
        # Ordering, not timing: the first answer waits until the talker has broadcast (and
        # so written the finding), the message then in this member's inbox for its next
        # turn. Or already in this request: a talker quicker than this member's start sent
        # it before the member's first turn took its inbox (a loaded CI machine waited here
        # for a message that was already read).
        if not any("main is in app.py" in t for t in user_texts(req)):
            listener = next(s.id for s in catalog.list_sessions(limit=20) if "LISTEN:" in s.task)
            wait_for(lambda: catalog.pending_count(listener, ["user"]) > 0, timeout=60)
        return calls(call("memory_get", key="finding"))

    def listener_reads(req: FakeRequest) -> Reply:
        seen["listener_user"] = user_texts(req)
        seen["listener_memory"] = tool_texts(req)[-1]
        # A compare-and-set over a stale version is told it conflicted.
        return calls(call("memory_set", key="finding", value="mine", expected_version=0))

    def listener_submits(req: FakeRequest) -> Reply:
        seen["conflict"] = tool_texts(req)[-1]
        return calls(call("submit_result", result=RESULTS["explore"]))

    def latecomer(req: FakeRequest) -> Reply:
        seen["late_user"] = user_texts(req)
        return calls(call("submit_result", result=RESULTS["explore"]))

    def merge(req: FakeRequest) -> Reply:
        seen["coordinator_user"] = user_texts(req)
        return text("merged")

    script = Scripted(
        {
            "CHATTY": Agent([calls(call("submit_plan", **PLAN)), merge]),
            "TALK:": Agent([talker_shares, talker_checks]),
            "LISTEN:": Agent([listener_waits, listener_reads, listener_submits]),
            "LATE:": Agent([latecomer]),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    _res, doc = swarm_json(sd_home, "CHATTY swarm", workdir)
    sid = doc["session_id"]
    talker_id, listener_id, late_id = (m["session_id"] for m in doc["members"])

    written, sent, told, lost = seen["talker_results"]  # type: ignore[misc]
    assert json.loads(written) == {"key": "finding", "written": True, "version": 1}
    assert sent == (
        f"sent to the swarm: the members live now ({listener_id}), and those that start later"
    )
    assert told == f"sent to {sid}"
    assert "nobody-at-all is not your sub-agent nor a member of your swarm" in lost
    # The listener heard the broadcast once, and so did the member that started after it.
    said = f"broadcast from talker: TALK: share what you find ({talker_id}): main is in app.py"
    for who in ("listener_user", "late_user"):
        assert [t for t in seen[who] if "main is in app.py" in t] == [said], who  # type: ignore[union-attr]
    assert late_id.endswith(".3-latecomer")
    assert json.loads(str(seen["listener_memory"])) == {
        "key": "finding",
        "found": True,
        "version": 1,
        "value": {"main": "app.py:1"},
    }
    conflict = str(seen["conflict"])
    assert "conflict:" in conflict and '"current_version": 1' in conflict
    assert '"current_value": {"main": "app.py:1"}' in conflict
    # The coordinator got the note before the members' results.
    notes = [t for t in seen["coordinator_user"] if "note for the coordinator" in t]  # type: ignore[union-attr]
    assert len(notes) == 1 and "talker" in notes[0]
    assert said in seen["coordinator_user"]  # type: ignore[operator]
    assert seen["coordinator_user"][-1].startswith("The members have finished")  # type: ignore[index]

    shown = run_cli(sd_home, "memory", "get", "finding", "--session", listener_id)
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout) == {"main": "app.py:1"}
    assert "version 1 · by " + talker_id in shown.stderr
    listing = run_cli(sd_home, "memory", "ls", "--session", sid, "--json")
    assert [e["key"] for e in json.loads(listing.stdout)] == ["finding"]
    history = run_cli(sd_home, "memory", "history", "finding", "--session", talker_id, "--json")
    assert [(h["version"], h["writer"]) for h in json.loads(history.stdout)] == [(1, talker_id)]
    scopes = run_cli(sd_home, "memory", "ls", "--json")
    assert json.loads(scopes.stdout) == [{"scope": "swarm", "id": sid, "keys": 1}]
    # Removing the swarm's tree removes its blackboard.
    assert run_cli(sd_home, "sessions", "rm", sid).code == 0
    assert json.loads(run_cli(sd_home, "memory", "ls", "--json").stdout) == []
    assert catalog.find_session(talker_id) is None
