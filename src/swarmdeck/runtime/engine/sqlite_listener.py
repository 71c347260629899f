"""DBOS's notification poller on SQLite, one statement a pass for every waiting `recv`."""

from __future__ import annotations

import logging
import time
from typing import Any

import sqlalchemy as sa

from swarmdeck.runtime.engine.workflow import POLL_BATCH


def _sqlite_listener(sys_db: Any) -> None:
    """DBOS's notification poller on SQLite, with one statement a pass for every waiting
    `recv` instead of one transaction each.

    DBOS's own poller checks each waiter in a transaction of its own, every poll (50 ms
    here): 1,000 sessions in a `wait` were 20,000 write transactions a second (our SQLite
    connections begin IMMEDIATE), which held the write lock from every session's own
    writes. One read a pass finds every unconsumed message for the waiters and wakes
    theirs; the recv itself still consumes it, as before. Workflow events and streams
    (which swarmdeck does not wait on) are left to the per-entry check.
    """
    notifications = sys_db.tables.notifications
    interval = sys_db._notification_listener_polling_interval_sec
    while sys_db._run_background_processes:
        time.sleep(interval)
        try:
            waiters = sys_db.notifications_map.snapshot()
            if waiters:
                destinations = sorted({components[0] for _, components, _ in waiters})
                found: set[tuple[str, str]] = set()
                with sys_db.engine.connect() as conn:  # a read: no write lock
                    for at in range(0, len(destinations), POLL_BATCH):
                        found.update(
                            (row[0], row[1])
                            for row in conn.execute(
                                sa.select(notifications.c.destination_uuid, notifications.c.topic)
                                .where(
                                    notifications.c.destination_uuid.in_(
                                        destinations[at : at + POLL_BATCH]
                                    ),
                                    notifications.c.consumed == False,  # noqa: E712
                                )
                                .distinct()
                            )
                        )
                for _, (destination, topic, _key), signal in waiters:
                    if (destination, topic) in found:
                        signal.set()
            _poll_each(sys_db, sys_db.workflow_events_map, sys_db.tables.workflow_events)
            _poll_each(sys_db, sys_db.streams_map, sys_db.tables.streams)
        except Exception as exc:
            if sys_db._run_background_processes:
                logging.getLogger("dbos").warning("notification poller error: %s", exc)
                time.sleep(interval)


def _poll_each(sys_db: Any, waiting: Any, table: Any) -> None:
    """DBOS's own check, waiter by waiter, of a map of waiters keyed by (workflow, key)."""
    for _, (wf_id, key, shard), signal in waiting.snapshot():
        with sys_db.engine.connect() as conn:
            where = [*sys_db._wf(table, wf_id, shard_key=shard), table.c.key == key]
            if conn.execute(sa.select(sa.literal(1)).where(*where).limit(1)).first():
                signal.set()


def install_sqlite_listener() -> bool:
    """Put _sqlite_listener in place of DBOS's SQLite poller (before DBOS launches);
    False, leaving DBOS's own, when this DBOS lacks what it relies on."""
    try:
        from dbos._sys_db_sqlite import SQLiteSystemDatabase
    except ImportError:
        return False
    if "_notification_listener" not in vars(SQLiteSystemDatabase) or not hasattr(
        SQLiteSystemDatabase, "_wf"
    ):
        return False
    SQLiteSystemDatabase._notification_listener = _sqlite_listener  # type: ignore[method-assign]
    return True
