"""A session's row in the read model: the swarm badge of a coordinator, a timer's deadline
and the question of a session that asks."""

from __future__ import annotations

import json

from swarmdeck.catalog.records import EventRecord, SessionRecord
from swarmdeck.views.fleet import build_row


def record(**fields: object) -> SessionRecord:
    base: dict[str, object] = {
        "id": "s1", "parent_id": None, "root_id": "s1", "depth": 0, "agent": None,
        "model": "fake:m", "mode": "agent", "workdir": "/w", "run_dir": "/r",
        "status": "running", "title": "t", "task": "do it", "system_message": None,
        "tool_names": None, "options": {}, "result": None, "final_text": None,
        "error": None, "generation": 0, "created_at": 100.0, "updated_at": 110.0,
    }  # fmt: skip
    return SessionRecord(**{**base, **fields})  # type: ignore[arg-type]


def turn(name: str, **args: object) -> EventRecord:
    calls = [{"id": "c1", "name": name, "arguments": json.dumps(args)}]
    return EventRecord(1, "s1", 2, "k", "assistant", {"text": "", "tool_calls": calls}, 110.0)


def test_a_swarm_coordinator_gets_its_teams_badge_and_others_none() -> None:
    team = {"swarm": {"team": {"name": "reviewers"}}}
    assert build_row(record(mode="swarm", options=team), "s1", None, False).swarm == "reviewers"
    assert build_row(record(mode="swarm"), "s1", None, False).swarm == "swarm"
    assert build_row(record(), "s1", None, False).swarm is None


def test_a_timer_counts_down_and_a_question_is_kept() -> None:
    waiting = build_row(record(status="waiting"), "s1", None, False, turn("wait", seconds=30))
    assert waiting.wake_at == 140.0 and waiting.seconds_left(130.0) == 10.0
    asks = build_row(
        record(status="input_required"), "s1", None, True, turn("ask_user", question="why?")
    )
    # No worker runs it now, yet it needs you, not lost: the answer waits for one.
    assert asks.status == "input_required" and asks.needs_me and asks.question == "why?"
    assert asks.unheld
    lost = build_row(record(status="waiting"), "s1", None, True, turn("wait", seconds=30))
    assert lost.status == "orphaned" and lost.unheld
