"""Putting a dead executor's workflows back on their queue costs a constant number of
statements, however many there are (DBOS's own recovery spends a transaction on each: 1.8 s
for 100 sessions on a restart), and moves only what it should: the dead executor's PENDING
workflows, each onto its own queue, once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from swarmdeck.runtime.engine import (
    APP_NAME,
    APP_VERSION,
    SESSIONS_QUEUE,
    Engine,
    _dbos,
    _reenqueue_all,
)
from swarmdeck.runtime.host import Host
from tests.conftest import Store

MANY = 50
OTHER_QUEUE = "swarmdeck_other"


@pytest.fixture
def engine(store: Store) -> Iterator[Engine]:
    """A launched engine that serves no session queue (nothing dequeues what moves)."""
    host = Host()
    try:
        yield host.launch()
    finally:
        host.shutdown()


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


def _statements(sys_db: Any, executors: list[str]) -> tuple[int, int]:
    """(workflows moved, SQL statements this thread sent) of one requeue. Only this thread's
    count: the engine's own threads (heartbeat, pollers) share the engine."""
    me = threading.get_ident()
    sent: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if threading.get_ident() == me:
            sent.append(statement)

    sa.event.listen(sys_db.engine, "before_cursor_execute", count)
    try:
        moved = _reenqueue_all(sys_db, executors, SESSIONS_QUEUE)
    finally:
        sa.event.remove(sys_db.engine, "before_cursor_execute", count)
    return moved, len(sent)


def test_a_dead_executors_workflows_go_back_in_a_constant_number_of_statements(
    engine: Engine,
) -> None:
    sys_db = _dbos()._sys_db
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
    assert _reenqueue_all(sys_db, ["dead-one", "dead-many"], SESSIONS_QUEUE) == 0
    assert _rows(sys_db, many) == after
