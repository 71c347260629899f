"""Putting a dead executor's workflows back on their queue costs a constant number of
statements, however many there are (DBOS's own recovery spends a transaction on each: 1.8 s
for 100 sessions on a restart), and moves only what it should: the dead executor's PENDING
workflows, each onto its own queue, once. A stopping engine asks the store once whether it
leaves such work."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.runtime.engine import APP_NAME, APP_VERSION, SESSIONS_QUEUE, Engine
from swarmdeck.runtime.engine.workflow import dbos_instance, reenqueue_all
from swarmdeck.runtime.host import Host, SessionRequest
from tests.conftest import Store, write_provider

MANY = 50
OTHER_QUEUE = "swarmdeck_other"
T = TypeVar("T")


@pytest.fixture
def host(store: Store, sd_home: Path, fake_llm) -> Iterator[Host]:
    """A host with a launched engine that serves no session queue (nothing dequeues what
    moves), and a provider its sessions may name."""
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    host = Host()
    host.launch()
    try:
        yield host
    finally:
        host.shutdown()


@pytest.fixture
def engine(host: Host) -> Engine:
    """The host's launched engine."""
    assert host.engine is not None
    return host.engine


def _seed(sys_db: Any, executor: str, count: int) -> list[str]:
    """`count` PENDING workflows claimed by `executor`: a third on the sessions queue, a
    third on another, a third started outside any queue."""
    queues = (SESSIONS_QUEUE, OTHER_QUEUE, None)
    rows = [
        {
            "workflow_uuid": f"{executor}-wf-{n}",
            "status": "PENDING",
            "name": "swarmdeck.session",
            "executor_id": executor,
            "application_version": APP_VERSION,
            "application_name": APP_NAME,
            "queue_name": queues[n % 3],
            "owner_xid": "its-token",
            "started_at_epoch_ms": 1,
            "created_at": 1,
            "updated_at": 1,
            "priority": 0,
        }
        for n in range(count)
    ]
    with sys_db.engine.begin() as conn:
        conn.execute(sys_db.tables.workflow_status.insert(), rows)
    return [r["workflow_uuid"] for r in rows]


def _rows(sys_db: Any, ids: list[str]) -> dict[str, tuple[Any, ...]]:
    ws = sys_db.tables.workflow_status
    with sys_db.engine.connect() as conn:
        found = conn.execute(
            sa.select(ws.c.workflow_uuid, ws.c.status, ws.c.queue_name, ws.c.owner_xid).where(
                ws.c.workflow_uuid.in_(ids)
            )
        )
        return {r[0]: tuple(r[1:]) for r in found}


def _counted(engines: list[sa.Engine], fn: Callable[[], T]) -> tuple[T, int]:
    """(what `fn` returned, SQL statements this thread sent on these engines meanwhile).
    Only this thread's: the engine's own threads (heartbeat, pollers) share them."""
    me = threading.get_ident()
    # Each execution's context, kept alive so that their ids stay distinct: on SQLite
    # DBOS's engine is a view of the catalog's, and both listeners see one statement.
    sent: list[Any] = []

    def count(
        _conn: Any, _cursor: Any, _statement: str, _params: Any, context: Any, *_: Any
    ) -> None:
        if threading.get_ident() == me:
            sent.append(context)

    for e in engines:
        sa.event.listen(e, "before_cursor_execute", count)
    try:
        result = fn()
    finally:
        for e in engines:
            sa.event.remove(e, "before_cursor_execute", count)
    return result, len({id(c) for c in sent})


def _statements(sys_db: Any, executors: list[str]) -> tuple[int, int]:
    """(workflows moved, statements sent) of one requeue."""
    return _counted([sys_db.engine], lambda: reenqueue_all(sys_db, executors, SESSIONS_QUEUE))


def test_a_dead_executors_workflows_go_back_in_a_constant_number_of_statements(
    engine: Engine,
) -> None:
    sys_db = dbos_instance()._sys_db
    _seed(sys_db, "dead-one", 1)
    many = _seed(sys_db, "dead-many", MANY)
    live = _seed(sys_db, engine.executor_id, 3)
    live_before = _rows(sys_db, live)

    moved_one, for_one = _statements(sys_db, ["dead-one"])
    moved_many, for_many = _statements(sys_db, ["dead-many"])
    assert (moved_one, moved_many) == (1, MANY)
    # One UPDATE (and on SQLite the BEGIN of its write transaction): never one per workflow.
    assert for_many == for_one <= 2, (for_one, for_many)

    after = _rows(sys_db, many)
    for n, wf in enumerate(many):
        # Back on the queue it came from; one started outside any queue goes on the fleet's.
        queue = (SESSIONS_QUEUE, OTHER_QUEUE, SESSIONS_QUEUE)[n % 3]
        assert after[wf] == ("ENQUEUED", queue, None), wf
    # The live executor's workflows are its own.
    assert _rows(sys_db, live) == live_before
    # A second call (a duplicate takeover) moves nothing.
    assert reenqueue_all(sys_db, ["dead-one", "dead-many"], SESSIONS_QUEUE) == 0
    assert _rows(sys_db, many) == after


def test_a_stopping_engine_asks_the_store_once_whether_it_left_work(
    host: Host, engine: Engine, workdir: Path
) -> None:
    sys_db = dbos_instance()._sys_db
    engines = [host.catalog.engine, sys_db.engine]
    # Nothing left, a workflow of its own still PENDING, a session it was to start: each
    # answered by one query (the catalog's and DBOS's tables are in one database).
    assert _counted(engines, engine._left_work) == (False, 1)
    [mine] = _seed(sys_db, engine.executor_id, 1)
    assert _counted(engines, engine._left_work) == (True, 1)
    ws = sys_db.tables.workflow_status
    with sys_db.engine.begin() as conn:
        conn.execute(ws.update().where(ws.c.workflow_uuid == mine).values(status="SUCCESS"))
    assert _counted(engines, engine._left_work) == (False, 1)
    host.create_session(SessionRequest("never started", "fake", workdir))
    assert _counted(engines, engine._left_work) == (True, 1)
    # It leaves the session claimable: its row stays open for a takeover.
    executor = engine.executor_id
    host.shutdown()
    workers = WorkerRegistry(host.catalog.engine, host.settings.hostname, 30.0)
    row = workers.get(executor)
    assert row is not None and row.stopped and row.recovered_by is None


def test_an_engine_that_leaves_nothing_closes_its_own_row(host: Host, engine: Engine) -> None:
    executor = engine.executor_id
    host.shutdown()
    row = WorkerRegistry(host.catalog.engine, host.settings.hostname, 30.0).get(executor)
    assert row is not None and row.recovered_by == executor
