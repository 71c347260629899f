"""The catalog contract for what sessions and workers share, on both stores (SQLite file,
PostgreSQL): inbox posts kept once and drains repeatable by their consumer step, read by
any number of kinds, and racing drains that neither lose nor double a message; workers
alive or dead by their heartbeats, a dead one claimed by exactly one claimer between
threads and between processes; and many processes opening a fresh store at once.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import pytest
import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import Delivery, InboxPost
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.errors import NotFoundError
from tests.conftest import Store
from tests.integration.test_catalog_support import (
    catalog_on_store,  # noqa: F401  (the `catalog` fixture)
    new_session,
    race,
    run_children,
)

# -- the inbox ----------------------------------------------------------------------------


def test_inbox_post_is_idempotent_and_drain_repeatable(catalog: Catalog) -> None:
    new_session(catalog, "s")
    statements: list[str] = []
    sa.event.listen(
        catalog.engine, "before_cursor_execute", lambda *a: statements.append(a[2].split()[0])
    )
    assert catalog.post("s", "m1", "user", {"text": "one"})
    # On PostgreSQL a message that rings its session (tests/integration/test_mail_notify.py)
    # is inserted and NOTIFYd in one statement.
    assert len(statements) == 1, statements
    assert not catalog.post("s", "m1", "user", {"text": "retried"})
    assert catalog.post("s", "m2", "timer", {"n": 2})
    assert catalog.pending_count("s") == 2 and catalog.pending_count("s", ["timer"]) == 1
    taken = catalog.drain("s", "step-1", ["user"])
    assert [(m.msg_id, m.payload) for m in taken] == [("m1", {"text": "one"})]
    # The same consumer step, rerun after a crash, gets the same messages back.
    assert [m.msg_id for m in catalog.drain("s", "step-1", ["user"])] == ["m1"]
    assert [m.msg_id for m in catalog.drain("s", "step-2")] == ["m2"]
    assert catalog.drain("s", "step-3") == [] and catalog.pending_count("s") == 0


def test_a_post_to_a_live_session_is_one_statement_that_says_why_nothing_was_stored(
    catalog: Catalog,
) -> None:
    new_session(catalog, "s")
    statements: list[str] = []
    sa.event.listen(
        catalog.engine, "before_cursor_execute", lambda *a: statements.append(a[2].split()[0])
    )
    assert catalog.post_live(InboxPost("s", "m1", "user", {"text": "one"})) == Delivery(True)
    # On PostgreSQL the check, the insert and the workers' NOTIFY are one statement.
    assert len(statements) == (2 if catalog.is_sqlite else 1), statements
    # A client's retry stores nothing and is no error.
    assert catalog.post_live(InboxPost("s", "m1", "user", {"text": "again"})) == Delivery(False)
    assert [(m.msg_id, m.payload) for m in catalog.delivered("s")] == [("m1", {"text": "one"})]
    catalog.update_session("s", status="cancelled")
    ended = catalog.post_live(InboxPost("s", "m2", "user", {"text": "late"}))
    assert ended == Delivery(False, "cancelled")
    assert [m.msg_id for m in catalog.delivered("s")] == ["m1"]
    with pytest.raises(NotFoundError, match="no session nope"):
        catalog.post_live(InboxPost("nope", "m1", "user", {"text": "lost"}))


def test_a_drain_records_what_it_takes_in_its_own_commit_once(catalog: Catalog) -> None:
    new_session(catalog, "s")
    catalog.post("s", "m1", "user", {"text": "one"})
    catalog.post("s", "m2", "answer", {"text": "two"})
    commits: list[int] = []
    sa.event.listen(catalog.engine, "commit", lambda _conn: commits.append(1))

    def as_transcript(kind: str) -> str:
        return "user" if kind == "answer" else kind

    taken = catalog.drain("s", "d1", None, "running", as_transcript)
    assert [m.msg_id for m in taken] == ["m1", "m2"] and len(commits) == 1
    entries = [(e.key, e.kind, e.payload) for e in catalog.events("s")][1:]
    assert entries == [("inbox:m1", "user", {"text": "one"}), ("inbox:m2", "user", {"text": "two"})]
    assert catalog.get_session("s").status == "running"
    # A rerun of the step takes the same messages, and records nothing twice.
    assert [m.msg_id for m in catalog.drain("s", "d1", None, None, as_transcript)] == ["m1", "m2"]
    assert [e.key for e in catalog.events("s")][1:] == ["inbox:m1", "inbox:m2"]
    # Taken by a release that recorded in a transaction of its own, and stopped before it
    # recorded: the rerun records it.
    catalog.post("s", "m3", "user", {"text": "three"})
    assert [m.msg_id for m in catalog.drain("s", "d2")] == ["m3"]
    assert [m.msg_id for m in catalog.drain("s", "d2", None, None, as_transcript)] == ["m3"]
    assert [e.key for e in catalog.events("s")][1:] == ["inbox:m1", "inbox:m2", "inbox:m3"]


def test_a_drain_a_ring_announced_claims_without_looking_first(catalog: Catalog) -> None:
    # After a ring the drain claims at once: one statement fewer than a drain that looks
    # first, the same messages, and nothing changed when the ring was stale.
    new_session(catalog, "s")
    statements: list[str] = []
    sa.event.listen(
        catalog.engine, "before_cursor_execute", lambda *a: statements.append(a[2].split()[0])
    )
    catalog.post("s", "m1", "user", {"text": "one"})
    statements.clear()
    looked = catalog.drain("s", "d1", None, "running")
    looking = len(statements)
    catalog.post("s", "m2", "user", {"text": "two"})
    catalog.set_status("s", "idle")
    statements.clear()
    rung = catalog.drain("s", "d2", None, "running", look_first=False)
    assert [m.msg_id for m in looked] == ["m1"] and [m.msg_id for m in rung] == ["m2"]
    assert len(statements) == looking - 1
    assert catalog.get_session("s").status == "running"
    catalog.set_status("s", "idle")
    assert catalog.drain("s", "d3", None, "running", look_first=False) == []
    assert catalog.get_session("s").status == "idle"
    # A rerun that finds its first run's claim and new mail takes both, in order, and
    # records only what it has not recorded.
    catalog.post("s", "m3", "user", {"text": "three"})
    taken = catalog.drain("s", "d2", None, None, lambda kind: kind, look_first=False)
    assert [m.msg_id for m in taken] == ["m2", "m3"]
    assert [e.key for e in catalog.events("s")][1:] == ["inbox:m2", "inbox:m3"]


def test_a_drain_whose_claim_is_its_record_is_answered_by_the_claim_alone(
    catalog: Catalog,
) -> None:
    # Workflow format 6: a session loop's drain is no engine step. A rerun after its claim
    # committed gets what the claim took and no later mail (its first run went on with
    # those alone); a replay past it reads the claim and writes nothing.
    new_session(catalog, "s")
    catalog.post("s", "m1", "user", {"text": "one"})
    first = catalog.drain("s", "g0:d1", None, "running", lambda kind: kind, once=True)
    catalog.post("s", "m2", "user", {"text": "two"})
    for look_first in (True, False):
        rerun = catalog.drain("s", "g0:d1", None, "running", lambda k: k, look_first, once=True)
        assert [m.msg_id for m in rerun] == [m.msg_id for m in first] == ["m1"]
    assert catalog.pending_count("s") == 1
    statements: list[str] = []
    sa.event.listen(
        catalog.engine, "before_cursor_execute", lambda *a: statements.append(a[2].split()[0])
    )
    assert [m.msg_id for m in catalog.taken_under("s", "g0:d1")] == ["m1"]
    assert catalog.taken_under("s", "g0:d2") == []
    assert statements == ["SELECT", "SELECT"]
    # An empty claim is no answer: the next drain takes what waits, once.
    assert [m.msg_id for m in catalog.drain("s", "g0:d2", None, None, once=True)] == ["m2"]
    assert [e.key for e in catalog.events("s")][1:] == ["inbox:m1"]


def test_a_purge_keeps_what_a_live_generations_drains_took(catalog: Catalog) -> None:
    # A replay of the generation reads those claims back (format 6); the rest of what was
    # taken is in the transcripts, and goes.
    from swarmdeck.catalog.housekeeping import purge_consumed_inbox

    for sid in ("live", "ended"):
        new_session(catalog, sid)
        for n, claim in enumerate(["g0:d1", "turn:3", "g1:d1"]):
            catalog.post(sid, f"{sid}-{n}", "user", {"n": n})
            catalog.drain(sid, claim, None)
    catalog.advance_generation("live", 0)
    catalog.set_status("ended", "completed")
    catalog.post("live", "waiting", "user", {})
    assert purge_consumed_inbox(catalog, time.time() + 1)[0] == 5
    with catalog.engine.connect() as conn:
        left = conn.execute(sa.select(schema.inbox.c.msg_id).order_by(schema.inbox.c.id))
        assert list(left.scalars()) == ["live-2", "waiting"]


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
