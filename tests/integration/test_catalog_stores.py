"""The catalog contract: one suite that every store passes (SQLite file, PostgreSQL).

Each test states one promise the runtime relies on and runs on both stores, as a
provider-validation suite does; the concurrency promises are checked with threads and
with separate processes released together, the way several workers share one store.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from swarmdeck.catalog import access as catalog_access
from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog, WriteWouldWait
from swarmdeck.catalog.db import create_db_engine
from swarmdeck.catalog.records import InboxPost
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.errors import NotFoundError
from swarmdeck.models.types import Usage
from tests.conftest import Store
from tests.machine_load import stretched_by_load

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def catalog(store: Store) -> Iterator[Catalog]:
    """A catalog on a fresh store; its engine is closed after the test."""
    cat = Catalog.open(store.url)
    yield cat
    cat.engine.dispose()


def new_session(cat: Catalog, sid: str, parent: str | None = None, **fields: Any) -> None:
    """A session under `parent` (root, depth and workdir filled in)."""
    root, depth = sid, 0
    if parent is not None:
        up = cat.get_session(parent)
        root, depth = up.root_id, up.depth + 1
    cat.create_session(
        session_id=sid,
        model=fields.pop("model", "fake:scripted"),
        mode=fields.pop("mode", "agent"),
        workdir="/tmp/w",
        run_dir=f"/tmp/runs/{sid}",
        task=fields.pop("task", f"task of {sid}"),
        parent_id=parent,
        root_id=root,
        depth=depth,
        **fields,
    )


def race(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run fn(0..n-1) on n threads released together by a barrier; results in index order."""
    barrier = threading.Barrier(n)

    def go(i: int) -> Any:
        barrier.wait(timeout=30)
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(go, range(n)))


# -- helper processes ---------------------------------------------------------------------

# Each child opens the store, says "ready", waits for "go" on stdin, does its part and
# prints one JSON line. The parent releases them all at once so they really contend.
CHILD = textwrap.dedent(
    """
    import json, sys
    import sqlalchemy as sa
    from swarmdeck.catalog.catalog import Catalog
    from swarmdeck.catalog.workers import WorkerRegistry

    role, url, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if role != "open":
        cat = Catalog.open(url)
    print("ready", flush=True)
    sys.stdin.readline()
    if role == "open":
        cat = Catalog.open(url)
        out = sorted(sa.inspect(cat.engine).get_table_names())
    elif role == "append":
        out = [cat.append_event("s", f"{name}-{i}", "note", {"i": i}) for i in range(count)]
        out += [cat.append_event("s", f"shared-{i}", "note", {"by": name}) for i in range(count)]
    elif role == "claim":
        out = WorkerRegistry(cat.engine).claim_dead(name)
    print(json.dumps(out), flush=True)
    """
)


def run_children(role: str, url: str, names: list[str], count: int = 0) -> list[Any]:
    """Start one child per name, release them together, return their outputs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMDECK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, role, url, name, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in names
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", p.stderr.read() if p.stderr else line
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            outputs.append(json.loads(out.strip().splitlines()[-1]))
        return outputs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# -- sessions -----------------------------------------------------------------------------


def test_create_get_and_create_again(catalog: Catalog) -> None:
    rec = catalog.create_session(
        session_id="s1",
        model="fake:scripted",
        mode="code",
        workdir="/w",
        run_dir="/r",
        task="do it ✓",
        title="t",
        tool_names=["read_file"],
        options={"max_turns": 3},
    )
    assert (rec.id, rec.root_id, rec.depth, rec.status) == ("s1", "s1", 0, "pending")
    assert rec.tool_names == ["read_file"] and rec.options == {"max_turns": 3}
    assert rec.task == "do it ✓" and rec.result is None and not rec.terminal
    # Creating the same id again (a step rerun) keeps the stored session untouched.
    again = catalog.create_session(
        session_id="s1", model="other", mode="agent", workdir="/x", run_dir="/y", task="other"
    )
    assert again == rec
    assert catalog.get_session("s1") == rec
    assert catalog.find_session("nope") is None
    with pytest.raises(NotFoundError):
        catalog.get_session("nope")


def test_create_many_at_once_and_again(catalog: Catalog) -> None:
    def spec(sid: str, task: str) -> dict[str, Any]:
        return {
            "session_id": sid,
            "model": "fake:scripted",
            "mode": "agent",
            "workdir": "/w",
            "run_dir": f"/r/{sid}",
            "task": task,
        }

    made = catalog.create_sessions([spec(f"b{i}", f"task {i}") for i in range(3)])
    assert [r.id for r in made] == ["b0", "b1", "b2"]
    assert [catalog.get_session(f"b{i}") for i in range(3)] == made
    assert [e.payload["text"] for e in catalog.events("b1")] == ["task 1"]
    # One id stored already: each is created on its own, the stored one left untouched.
    again = catalog.create_sessions([spec("b1", "other"), spec("b3", "task 3")])
    assert again[0] == made[1] and catalog.get_session("b3").task == "task 3"
    assert [e.payload["text"] for e in catalog.events("b1")] == ["task 1"]
    assert catalog.create_sessions([]) == []


def test_still_held_by_sees_live_sessions_not_yet_claimed_again(catalog: Catalog) -> None:
    for sid in ("h1", "h2"):
        new_session(catalog, sid)
        catalog.claim_run(sid, "dead-1")
    assert catalog.still_held_by(["dead-1"]) and catalog.still_held_by(["other", "dead-1"])
    assert not catalog.still_held_by(["other"])
    catalog.claim_run("h1", "live-2")  # taken over: its new execution began
    assert catalog.still_held_by(["dead-1"])
    catalog.set_status("h2", "completed")  # an ended session holds nothing
    assert not catalog.still_held_by(["dead-1"])


def test_update_session_round_trips(catalog: Catalog) -> None:
    new_session(catalog, "s1")
    new_session(catalog, "s2")
    before = catalog.get_session("s1")
    catalog.set_status("s1", "running")
    assert catalog.get_session("s1").status == "running"
    result = {"answer": 42, "notes": ["ü", None], "nested": {"ok": True}}
    catalog.update_session(
        "s1", status="completed", result=result, final_text="done", options={"a": 1}
    )
    after = catalog.get_session("s1")
    assert (after.status, after.result, after.final_text) == ("completed", result, "done")
    assert after.options == {"a": 1} and after.terminal
    assert after.updated_at >= before.updated_at and after.created_at == before.created_at
    catalog.set_status("s2", "failed", error="boom")
    s2 = catalog.get_session("s2")
    assert (s2.status, s2.error) == ("failed", "boom")
    # An ended session keeps its end: a late step of a cancelled workflow cannot revive it.
    catalog.set_status("s1", "running")
    assert catalog.get_session("s1").status == "completed"


def test_list_sessions_newest_first_with_filters(catalog: Catalog) -> None:
    new_session(catalog, "r1")
    new_session(catalog, "c1", parent="r1")
    new_session(catalog, "c2", parent="r1")
    new_session(catalog, "r2")
    for i, sid in enumerate(["r1", "c1", "c2", "r2"]):
        catalog.update_session(sid, created_at=1000.0 + i)
    catalog.set_status("c2", "completed")
    assert [s.id for s in catalog.list_sessions()] == ["r2", "c2", "c1", "r1"]
    assert [s.id for s in catalog.list_sessions(limit=2)] == ["r2", "c2"]
    assert [s.id for s in catalog.list_sessions(status="completed")] == ["c2"]
    assert [s.id for s in catalog.list_sessions(parent_id="r1")] == ["c2", "c1"]
    assert [s.id for s in catalog.list_sessions(root_id="r1")] == ["c2", "c1", "r1"]


def test_resolve_session_id_by_prefix(catalog: Catalog) -> None:
    new_session(catalog, "abc123")
    new_session(catalog, "abd456")
    assert catalog.resolve_session_id("abc123") == "abc123"
    assert catalog.resolve_session_id("abc") == "abc123"
    with pytest.raises(NotFoundError):
        catalog.resolve_session_id("ab")  # ambiguous
    with pytest.raises(NotFoundError):
        catalog.resolve_session_id("zz")


def test_descendants_and_delete_tree(catalog: Catalog) -> None:
    new_session(catalog, "root")
    for sid, parent in [("a", "root"), ("b", "root"), ("a1", "a"), ("a2", "a"), ("a1x", "a1")]:
        new_session(catalog, sid, parent=parent)
    new_session(catalog, "other")
    for sid in ["root", "a", "a1", "a1x", "b", "other"]:
        catalog.record_usage(sid, 0, "fake", "m", Usage(input=1, output=1), None)
        catalog.mark_tool_started(sid, "0:call")

    found = catalog.descendant_ids("root")
    assert sorted(found) == ["a", "a1", "a1x", "a2", "b"]
    depths = [catalog.get_session(s).depth for s in found]
    assert depths == sorted(depths), "not breadth first"
    assert catalog.get_session("a1x").root_id == "root"
    assert catalog.descendant_ids("b") == []

    removed = catalog.delete_session_tree("a")
    assert sorted(removed) == ["a", "a1", "a1x", "a2"]
    assert all(catalog.find_session(s) is None for s in removed)
    assert all(catalog.events(s) == [] for s in removed)
    assert catalog.usage_totals(removed).turns == 0
    assert catalog.mark_tool_started("a1", "0:call"), "tool marks of removed sessions remain"
    # The rest of the tree and the unrelated session keep everything.
    assert sorted(catalog.descendant_ids("root")) == ["b"]
    for sid in ["root", "b", "other"]:
        assert [e.key for e in catalog.events(sid)] == ["task"]
        assert not catalog.mark_tool_started(sid, "0:call")
    assert catalog.usage_totals(["root", "b", "other"]).turns == 3


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


# -- the inbox ----------------------------------------------------------------------------


def test_inbox_post_is_idempotent_and_drain_repeatable(catalog: Catalog) -> None:
    new_session(catalog, "s")
    assert catalog.post("s", "m1", "user", {"text": "one"})
    assert not catalog.post("s", "m1", "user", {"text": "retried"})
    assert catalog.post("s", "m2", "timer", {"n": 2})
    assert catalog.pending_count("s") == 2 and catalog.pending_count("s", ["timer"]) == 1
    taken = catalog.drain("s", "step-1", ["user"])
    assert [(m.msg_id, m.payload) for m in taken] == [("m1", {"text": "one"})]
    # The same consumer step, rerun after a crash, gets the same messages back.
    assert [m.msg_id for m in catalog.drain("s", "step-1", ["user"])] == ["m1"]
    assert [m.msg_id for m in catalog.drain("s", "step-2")] == ["m2"]
    assert catalog.drain("s", "step-3") == [] and catalog.pending_count("s") == 0


def test_the_inbox_is_read_by_any_number_of_kinds(catalog: Catalog) -> None:
    # One bound value per kind (statements.kind_params): lists of every length read right,
    # as the same statement reused for another list of that length.
    new_session(catalog, "s")
    for n, kind in enumerate(["user", "child_update", "timer", "user"]):
        catalog.post("s", f"m{n}", kind, {"n": n})
    assert catalog.pending_count("s", []) == 0
    assert catalog.pending_count("s", ["user"]) == 2
    assert catalog.pending_count("s", ("timer", "user")) == 3
    assert catalog.pending_count("s", ["answer", "child_update"]) == 1
    assert catalog.pending_count("s", iter(["user", "child_update", "timer"])) == 4
    assert not catalog.news("s", 0, [], "turn:0")[1]
    assert catalog.news("s", 0, ["answer", "timer"], "turn:0")[1]
    assert not catalog.news("s", 0, ["answer", "cron"], "turn:0")[1]
    assert catalog.drain("s", "d0", []) == []
    taken = catalog.drain("s", "d1", iter(["timer", "child_update"]))
    assert sorted(m.msg_id for m in taken) == ["m1", "m2"]
    assert [m.msg_id for m in catalog.drain("s", "d2", ["user", "timer"])] == ["m0", "m3"]
    assert catalog.pending_count("s") == 0


def test_inbox_drains_race_without_losing_or_doubling(catalog: Catalog) -> None:
    new_session(catalog, "s")
    posted = [f"m{i}" for i in range(60)]

    def work(i: int) -> list[str]:
        if i < 2:  # two posters
            for m in posted[i::2]:
                catalog.post("s", m, "user", {})
            return []
        got: list[str] = []
        for n in range(40):  # four consumers, each drain a distinct claim
            got += [m.msg_id for m in catalog.drain("s", f"c{i}-{n}")]
        return got

    taken = [m for got in race(6, work) for m in got]
    taken += [m.msg_id for m in catalog.drain("s", "final")]
    assert sorted(taken) == sorted(posted)


# -- the worker registry ------------------------------------------------------------------


def add_workers(cat: Catalog, prefix: str, n: int, **fields: Any) -> list[str]:
    """Insert n worker rows directly (alive or dead as the fields say)."""
    now = time.time()
    ids = [f"{prefix}-{i}" for i in range(n)]
    row = {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start": "0",  # not our start time: a dead process whose pid was reused
        "started_at": now,
        "heartbeat_at": now,
        "stopped": False,
        **fields,
    }
    with cat.engine.begin() as conn:
        conn.execute(schema.workers.insert(), [{"executor_id": i, **row} for i in ids])
    return ids


def test_worker_liveness(catalog: Catalog) -> None:
    # A lease of ten minutes: the live rows never beat here, and must stay live however
    # slowly the test runs; the dead ones beat at 0.
    lease = 600.0
    reg = WorkerRegistry(catalog.engine, lease_s=lease)
    reg.register("me")
    dead = add_workers(catalog, "dead", 1)
    far_alive = add_workers(catalog, "far", 1, hostname="elsewhere.invalid")
    far_stale = add_workers(catalog, "stale", 1, hostname="elsewhere.invalid", heartbeat_at=0.0)
    assert sorted(w.executor_id for w in reg.alive()) == sorted(["me", *far_alive])
    before = next(w for w in reg.rows() if w.executor_id == "me").heartbeat_at
    time.sleep(0.01)
    reg.heartbeat("me")
    assert next(w for w in reg.rows() if w.executor_id == "me").heartbeat_at > before
    assert sorted(reg.claim_dead("me")) == sorted(dead + far_stale)
    assert reg.claim_dead("me") == []  # claimed rows are gone from the registry's view
    reg.stop("me")
    assert [w.executor_id for w in reg.alive()] == far_alive
    # A stopped executor is claimable at once, but never by itself.
    assert reg.claim_dead("me") == []
    assert WorkerRegistry(catalog.engine, lease_s=lease).claim_dead("next") == ["me"]
    # One that stops with no work left closes its row: there is nothing to claim.
    reg.register("done")
    reg.stop("done", left_work=False)
    assert WorkerRegistry(catalog.engine, lease_s=lease).claim_dead("next") == []
    assert "done" not in [w.executor_id for w in reg.rows()]


def check_claims(cat: Catalog, claims: dict[str, list[str]], dead: list[str]) -> None:
    """Every dead executor was won by exactly one claimer, as the table records."""
    won = [x for ids in claims.values() for x in ids]
    assert sorted(won) == sorted(dead), claims
    with cat.engine.connect() as conn:
        rows = {
            r.executor_id: r.recovered_by
            for r in conn.execute(
                sa.select(schema.workers.c.executor_id, schema.workers.c.recovered_by)
            )
        }
    for claimer, ids in claims.items():
        assert all(rows[x] == claimer for x in ids)


def test_claim_dead_is_atomic_between_threads(catalog: Catalog, store: Store) -> None:
    dead = add_workers(catalog, "dead", 40)
    alive = add_workers(catalog, "alive", 3, pid_start=None)
    # Separate engines, as two worker processes have.
    cats = [Catalog.open(store.url) for _ in range(2)]
    try:
        results = race(2, lambda i: WorkerRegistry(cats[i].engine).claim_dead(f"claimer-{i}"))
    finally:
        for c in cats:
            c.engine.dispose()
    check_claims(catalog, {f"claimer-{i}": r for i, r in enumerate(results)}, dead)
    assert not set(alive) & {x for r in results for x in r}


def test_claim_dead_is_atomic_between_processes(catalog: Catalog, store: Store) -> None:
    dead = add_workers(catalog, "dead", 40)
    names = ["claimer-a", "claimer-b"]
    outputs = run_children("claim", store.url, names)
    check_claims(catalog, dict(zip(names, outputs, strict=True)), dead)


# -- opening the store --------------------------------------------------------------------


def test_many_processes_open_a_fresh_store_at_once(store: Store) -> None:
    outputs = run_children("open", store.url, ["w0", "w1", "w2", "w3"])
    expected = {t.name for t in schema.metadata.sorted_tables}
    for tables in outputs:
        assert expected <= set(tables)
