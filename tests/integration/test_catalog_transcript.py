"""The catalog contract for what a run writes, on both stores (SQLite file, PostgreSQL):
transcript entries kept once by key, new entries and waiting mail read in one round trip,
a generation's advance, end and start kept once, no-wait writes that give way to another
writer; seqs without gaps under concurrent threads and processes; usage rows and tool marks
written once per turn however many race; artifacts replaced by name.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from swarmdeck.catalog import access as catalog_access
from swarmdeck.catalog.catalog import Catalog, WriteWouldWait
from swarmdeck.catalog.db import create_db_engine
from swarmdeck.catalog.records import EndWrite, InboxPost, TurnWrite
from swarmdeck.errors import NotFoundError
from swarmdeck.models.types import Usage
from tests.conftest import Store
from tests.integration.test_catalog_support import (
    catalog_on_store,  # noqa: F401  (the `catalog` fixture)
    new_session,
    race,
    run_children,
)
from tests.machine_load import stretched_by_load

# -- the transcript -----------------------------------------------------------------------


def test_append_event_is_idempotent_by_key(catalog: Catalog) -> None:
    # A session is created with its task as the first entry, in the same transaction.
    new_session(catalog, "s", task="first")
    new_session(catalog, "t")
    assert not catalog.append_event("s", "task", "task", {"text": "second"})
    assert catalog.append_event("s", "turn:0", "assistant", {"text": "hi", "tool_calls": []})
    assert catalog.append_event("t", "note", "user", {"text": "other session"})
    events = catalog.events("s")
    assert [(e.seq, e.key, e.payload) for e in events] == [
        (1, "task", {"text": "first"}),
        (2, "turn:0", {"text": "hi", "tool_calls": []}),
    ]
    assert [e.seq for e in catalog.events("t")] == [1, 2]
    assert catalog.has_event("s", "turn:0") and not catalog.has_event("t", "turn:0")
    assert [e.key for e in catalog.events("s", kinds=["assistant"])] == ["turn:0"]
    assert [e.key for e in catalog.events("s", after_id=events[0].id)] == ["turn:0"]
    assert [e.key for e in catalog.events("s", limit=1)] == ["task"]


def test_news_reads_new_events_and_waiting_mail_at_once(catalog: Catalog) -> None:
    new_session(catalog, "s")
    statements: list[str] = []

    def count(_conn, _cursor, statement: str, *_args) -> None:  # type: ignore[no-untyped-def]
        statements.append(statement)

    sa.event.listen(catalog.engine, "before_cursor_execute", count)
    try:
        events, mail = catalog.news("s", 0, ["user"], "turn:0")
    finally:
        sa.event.remove(catalog.engine, "before_cursor_execute", count)
    assert len(statements) == 1, statements  # one statement: one round trip, at every turn
    assert [e.key for e in events] == ["task"] and not mail
    assert (events[0].seq, events[0].kind, events[0].payload) == (1, "task", {"text": "task of s"})
    catalog.post("s", "m1", "child_update", {"text": "not asked for"})
    assert not catalog.news("s", events[-1].id, ["user"], "turn:0")[1]
    catalog.post("s", "m2", "user", {"text": "hello"})
    fresh, mail = catalog.news("s", events[-1].id, ["user"], "turn:0")
    assert fresh == [] and mail
    # Taken under this claim but not yet recorded (a crash in between): still mail for it.
    catalog.drain("s", "turn:0", ["user"])
    assert catalog.news("s", 0, ["user"], "turn:0")[1]
    assert not catalog.news("s", 0, ["user"], "turn:1")[1]


def test_generation_advances_once_however_often_asked(catalog: Catalog) -> None:
    new_session(catalog, "s")
    assert catalog.advance_generation("s", 0) == 1
    assert catalog.advance_generation("s", 0) == 1  # a rerun after a crash: no second bump
    assert catalog.get_session("s").generation == 1
    assert catalog.advance_generation("s", 1) == 2
    assert catalog.get_session("s").generation == 2


def test_first_end_of_a_generation_wins_with_its_row_and_notice(catalog: Catalog) -> None:
    new_session(catalog, "p")
    new_session(catalog, "s", parent="p")

    def notice(sid: str, text: str) -> InboxPost:
        return InboxPost("p", f"child:{sid}:0", "child_update", {"text": text})

    cancelled = {"status": "cancelled", "error": "stop", "reason": "cancelled"}
    assert catalog.end_session(
        "s", "end:g0", cancelled, notice("s", "s cancelled"), status="cancelled", error="stop"
    )
    # A finish that raced the cancel writes neither its entry, nor its row, nor its notice.
    done = {"status": "completed", "error": None, "reason": "model_done"}
    assert not catalog.end_session(
        "s", "end:g0", done, notice("s", "s done"), status="completed", final_text="hi"
    )
    record = catalog.get_session("s")
    assert (record.status, record.error, record.final_text) == ("cancelled", "stop", None)
    ends = [e.payload for e in catalog.events("s", kinds=["status"])]
    assert ends == [cancelled]
    assert [i.payload["text"] for i in catalog.drain("p", "c1")] == ["s cancelled"]
    # A notice already delivered (a rerun's) is no error: the end itself is still stored.
    new_session(catalog, "t", parent="p")
    catalog.post("p", "child:t:0", "child_update", {"text": "early"})
    assert catalog.end_session("t", "end:g0", done, notice("t", "t done"), status="completed")
    assert catalog.get_session("t").status == "completed"


def test_a_last_turn_and_its_end_are_one_commit_unless_mail_waits(catalog: Catalog) -> None:
    new_session(catalog, "p")
    usage = {"turn": 0, "provider": "fake", "model": "m", "cost_usd": None, "input": 7}

    def last_turn(sid: str, text: str) -> str:
        turn = TurnWrite("turn:0", {"text": text, "tool_calls": []}, usage, time.time())
        entry = {"status": "completed", "error": None, "reason": "model_done"}
        notice = InboxPost("p", f"child:{sid}:0", "child_update", {"text": text})
        end = EndWrite("end:g0", entry, notice, {"status": "completed", "final_text": text})
        return catalog.end_with_turn(sid, turn, end, (["user"], "turn:1"))

    new_session(catalog, "s", parent="p")
    commits: list[int] = []
    sa.event.listen(catalog.engine, "commit", lambda _conn: commits.append(1))
    assert last_turn("s", "all done") == "ended"
    assert len(commits) == 1
    record = catalog.get_session("s")
    assert (record.status, record.final_text) == ("completed", "all done")
    assert [e.key for e in catalog.events("s")] == ["task", "turn:0", "end:g0"]
    assert catalog.usage_totals(["s"]).input == 7
    assert [i.payload["text"] for i in catalog.drain("p", "c1")] == ["all done"]
    assert last_turn("s", "again") == "stored"  # a rerun writes nothing
    # A person's message waits for the next turn: the turn is stored, the session goes on.
    new_session(catalog, "m", parent="p")
    catalog.post("m", "late", "user", {"text": "one more thing"})
    assert last_turn("m", "done?") == "turn"
    assert catalog.get_session("m").status == "pending"
    assert [e.key for e in catalog.events("m")] == ["task", "turn:0"]
    # A cancel ended it first: the turn is kept, the cancel's end stands.
    new_session(catalog, "c", parent="p")
    cancelled = {"status": "cancelled", "error": "stop", "reason": "cancelled"}
    assert catalog.end_session("c", "end:g0", cancelled, None, status="cancelled")
    assert last_turn("c", "finished") == "turn"
    assert catalog.get_session("c").status == "cancelled"
    assert [e.key for e in catalog.events("c")] == ["task", "end:g0", "turn:0"]
    assert [i.payload["text"] for i in catalog.drain("p", "c2")] == []


def test_open_run_marks_a_live_session_running_and_counts_its_turns(catalog: Catalog) -> None:
    new_session(catalog, "s")
    for turn in range(3):
        catalog.append_event("s", f"turn:{turn}", "assistant", {"text": "", "tool_calls": []})
    record, turns = catalog.open_run("s", "test-executor")
    assert (record.status, turns) == ("running", 3)
    assert catalog.get_session("s") == record
    catalog.set_status("s", "failed", error="boom")
    record, _ = catalog.open_run("s", "test-executor")
    assert (record.status, record.error) == ("failed", "boom")  # an ended session stays ended
    with pytest.raises(NotFoundError):
        catalog.open_run("nope", "test-executor")


def test_a_generation_start_is_kept_once_and_removed_with_its_session(catalog: Catalog) -> None:
    new_session(catalog, "s")
    assert catalog.generation_start("s", 0) is None
    assert catalog.keep_generation_start("s", 0, {"turns_done": 0}) == {"turns_done": 0}
    # A second worker that ran the same generation at once gets the first one's start.
    assert catalog.keep_generation_start("s", 0, {"turns_done": 5}) == {"turns_done": 0}
    assert catalog.keep_generation_start("s", 1, {"turns_done": 5}) == {"turns_done": 5}
    assert catalog.generation_start("s", 0) == {"turns_done": 0}
    catalog.delete_session_tree("s")
    assert catalog.generation_start("s", 0) is None


@contextlib.contextmanager
def hold_write_lock(url: str) -> Iterator[None]:
    """Another writer holding SQLite's write lock (a worker in another process, say)."""
    blocker = create_db_engine(url)
    with blocker.begin() as conn:
        conn.execute(sa.text("UPDATE sd_sessions SET title = 'busy' WHERE id = 's'"))
        yield
    blocker.dispose()


def test_a_no_wait_append_gives_way_to_a_writer_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writes made on the event loop are a SQLite matter; PostgreSQL writes wait in threads.
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    catalog = Catalog.open(url)
    new_session(catalog, "s")
    monkeypatch.setattr(catalog_access, "NO_WAIT_PAUSE_S", 0.2)
    with hold_write_lock(url):
        started = time.monotonic()
        with pytest.raises(WriteWouldWait):
            catalog.append_event("s", "turn:0", "assistant", {"text": "x"}, wait=False)
        # At once, not after the 30 s busy timeout.
        assert time.monotonic() - started < min(stretched_by_load(0.5), 10.0)
    assert not catalog.has_event("s", "turn:0")
    time.sleep(0.3)  # past the pause a failure starts (see the next test)
    assert catalog.append_event("s", "turn:0", "assistant", {"text": "x"}, wait=False)
    assert [e.key for e in catalog.events("s")] == ["task", "turn:0"]
    catalog.engine.dispose()


def test_no_wait_writes_give_up_at_once_for_a_moment_after_one_found_the_lock_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under contention most no-wait tries fail, each costing about a write: after one, the
    # next give up without a try until the pause ends (and their callers write waiting).
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    catalog = Catalog.open(url)
    new_session(catalog, "s")
    monkeypatch.setattr(catalog_access, "NO_WAIT_PAUSE_S", 60.0)
    with hold_write_lock(url), pytest.raises(WriteWouldWait):
        catalog.touch_active("s", wait=False)
    # The lock is free now, but within the pause a no-wait write does not try.
    with pytest.raises(WriteWouldWait):
        catalog.append_event("s", "turn:0", "assistant", {"text": "x"}, wait=False)
    assert not catalog.has_event("s", "turn:0")
    assert catalog.append_event("s", "turn:0", "assistant", {"text": "x"})  # waiting: writes
    catalog.engine.dispose()


def check_transcript(cat: Catalog, expected_keys: set[str]) -> None:
    """Seqs are 1..n without gaps or repeats, and a follower's id cursor sees them in seq
    order (so a tail that resumes after the highest id seen never skips an entry)."""
    events = cat.events("s")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert {e.key for e in events} == expected_keys and len(events) == len(expected_keys)
    ids = [e.id for e in events]
    assert ids == sorted(ids), "id order differs from seq order"


def test_seq_is_gapless_under_concurrent_threads(catalog: Catalog) -> None:
    new_session(catalog, "s")
    threads, each = 12, 40

    def append(t: int) -> list[bool]:
        own = [catalog.append_event("s", f"t{t}-{i}", "note", {"i": i}) for i in range(each)]
        # Every thread also tries the same keys, as reruns of one step would.
        shared = [catalog.append_event("s", f"shared-{i}", "note", {"t": t}) for i in range(5)]
        return own + shared

    results = race(threads, append)
    assert all(all(r[:each]) for r in results)
    assert [sum(r[each + i] for r in results) for i in range(5)] == [1] * 5
    keys = {f"t{t}-{i}" for t in range(threads) for i in range(each)}
    check_transcript(catalog, keys | {"task"} | {f"shared-{i}" for i in range(5)})
    # Each writer's own entries keep the order it wrote them in.
    for t in range(threads):
        mine = [e.payload["i"] for e in catalog.events("s") if e.key.startswith(f"t{t}-")]
        assert mine == list(range(each))


def test_seq_is_gapless_under_concurrent_processes(catalog: Catalog, store: Store) -> None:
    new_session(catalog, "s")
    names, count = ["p0", "p1", "p2", "p3"], 40
    outputs = run_children("append", store.url, names, count)
    assert all(all(out[:count]) for out in outputs)
    assert [sum(out[count + i] for out in outputs) for i in range(count)] == [1] * count
    keys = {f"{n}-{i}" for n in names for i in range(count)}
    check_transcript(catalog, keys | {"task"} | {f"shared-{i}" for i in range(count)})


# -- usage and once-effect marks ----------------------------------------------------------


def test_usage_is_recorded_once_per_turn(catalog: Catalog) -> None:
    new_session(catalog, "s")
    catalog.record_usage("s", 0, "fake", "m", Usage(input=10, output=5), 0.5)
    catalog.record_usage("s", 0, "fake", "m", Usage(input=99, output=99), 9.0)  # a rerun
    catalog.record_usage("s", 1, "fake", "m", Usage(input=1, output=2, reasoning=3), None)

    def rerun(i: int) -> None:
        catalog.record_usage("s", 2, "fake", "m", Usage(input=100 + i), None)

    race(6, rerun)
    totals = catalog.usage_totals(["s"])
    assert totals.turns == 3
    assert (totals.output, totals.reasoning, totals.cost_usd) == (7, 3, 0.5)
    assert 100 + 10 + 1 <= totals.input < 106 + 10 + 1
    assert totals.by_model["fake:m"]["turns"] == 3
    assert catalog.usage_totals(["nobody"]).turns == 0
    assert catalog.usage_totals(["s"], since=time.time() + 60).turns == 0


def test_turn_usage_is_written_with_its_event(catalog: Catalog) -> None:
    new_session(catalog, "s")

    def row(n: int) -> dict[str, Any]:
        return {"turn": 0, "provider": "fake", "model": "m", "cost_usd": None, "input": n}

    assert catalog.append_event("s", "turn:0", "assistant", {"text": "a"}, row(10))
    # A rerun of the turn's step stores neither a second event nor a second usage row.
    assert not catalog.append_event("s", "turn:0", "assistant", {"text": "b"}, row(99))
    won = race(
        4, lambda i: catalog.append_event("s", "turn:1", "assistant", {}, row(i) | {"turn": 1})
    )
    assert sorted(won) == [False, False, False, True]
    totals = catalog.usage_totals(["s"])
    assert totals.turns == 2 and 10 <= totals.input <= 13
    assert [e.key for e in catalog.events("s")] == ["task", "turn:0", "turn:1"]


def test_tool_mark_is_won_once(catalog: Catalog) -> None:
    new_session(catalog, "s")
    new_session(catalog, "t")
    won = race(6, lambda _i: catalog.mark_tool_started("s", "3:call_a"))
    assert sorted(won) == [False] * 5 + [True]
    assert catalog.mark_tool_started("s", "3:call_b")
    assert catalog.mark_tool_started("t", "3:call_a")
    assert not catalog.mark_tool_started("t", "3:call_a")


# -- artifacts ----------------------------------------------------------------------------


def test_artifact_put_replaces_even_when_racing(catalog: Catalog) -> None:
    new_session(catalog, "s")
    catalog.put_artifact("s", "report.md", "/a/1", 1, "a" * 64)
    catalog.put_artifact("s", "report.md", "/a/2", 2, "b" * 64)
    meta = catalog.artifact("s", "report.md")
    assert meta is not None and (meta["path"], meta["size"]) == ("/a/2", 2)
    assert catalog.artifact("s", "other.md") is None

    def put(i: int) -> None:
        for n in range(10):
            catalog.put_artifact("s", "race.md", f"/r/{i}", n, "c" * 64)

    race(4, put)
    assert sorted(a["name"] for a in catalog.artifacts_of(["s"])) == ["race.md", "report.md"]
