"""What started a turn, and which skills a session loaded, derived from its transcript."""

from __future__ import annotations

import json

from swarmdeck.catalog.records import EventRecord
from swarmdeck.runtime.journal import Journal
from swarmdeck.runtime.origin import input_origin, turn_origin

_seq = iter(range(1, 10_000))


def ev(kind: str, key: str, **payload: object) -> EventRecord:
    n = next(_seq)
    return EventRecord(n, "s", n, key, kind, dict(payload), float(n))


def assistant(turn: int, *calls: tuple[str, str, dict], origin: str | None = None) -> EventRecord:
    tool_calls = [{"id": i, "name": name, "arguments": json.dumps(a)} for i, name, a in calls]
    payload = {"text": "", "tool_calls": tool_calls}
    if origin:
        payload["origin"] = origin
    return ev("assistant", f"turn:{turn}", **payload)


def result(turn: int, call_id: str, name: str, is_error: bool = False) -> EventRecord:
    return ev(
        "tool_result",
        f"tool:{turn}:{call_id}",
        call_id=call_id,
        name=name,
        content="x",
        is_error=is_error,
    )


def test_inputs_are_told_apart_by_kind_and_key() -> None:
    plain = {"has_parent": False, "system": False}
    assert input_origin("task", "task", **plain) == "person"
    assert input_origin("task", "task", has_parent=True, system=False) == "parent"
    assert input_origin("task", "task", has_parent=True, system=True) == "system"
    assert input_origin("user", "inbox:8f3a", **plain) == "person"
    assert input_origin("user", "resume:2", **plain) == "person"
    assert input_origin("user", "inbox:from:p1:0:c1", **plain) == "parent"
    assert input_origin("user", "restart:3", **plain) == "system"
    assert input_origin("child_update", "inbox:child:x:0", **plain) == "child"
    assert input_origin("timer", "cron:12.5", **plain) == "cron"
    assert input_origin("status", "end:g0", **plain) is None
    # A person's message among others makes a person's turn; no input keeps the last one.
    assert turn_origin(["cron", "child", "person"], "cron") == "person"
    assert turn_origin(["child", "cron"], None) == "child"
    assert turn_origin([], "cron") == "cron"
    assert turn_origin([], None) == "unknown"


def test_the_journal_derives_origins_and_loaded_skills() -> None:
    j = Journal("s")
    j.take([ev("task", "task", text="go")])
    assert j.next_origin(has_parent=False, system=True) == "system"
    j.take(
        [
            assistant(
                0,
                ("c1", "load_skill", {"name": "stats"}),
                ("c2", "load_skill", {"name": "bad"}),
                origin="system",
            ),
            result(0, "c1", "load_skill"),
            result(0, "c2", "load_skill", is_error=True),
        ]
    )
    # Tool results are not inputs: the next turn continues the system's.
    assert j.next_origin(has_parent=False, system=True) == "system"
    assert j.skills_before(0) == [] and j.skills_before(1) == ["stats"]
    j.take([assistant(1, origin="system"), ev("timer", "cron:1.0", text="tick")])
    assert j.next_origin(has_parent=False, system=True) == "cron"
    j.take([ev("user", "inbox:abc", text="hi")])
    assert j.next_origin(has_parent=False, system=True) == "person"
    # A load whose result never came (a crash) loads nothing.
    j.take([assistant(2, ("c3", "load_skill", {"name": "later"}), origin="person")])
    assert j.skills_before(5) == ["stats"]
