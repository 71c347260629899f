"""DBOS's notification poller on SQLite: one indexed read a pass, whatever the number of
waiting `recv`s."""

from __future__ import annotations

import logging
import time
from typing import Any

import sqlalchemy as sa

# The poll reads the messages not yet consumed that were sent since its last pass, less
# this margin: a message's time is taken as it is inserted, a moment before its commit.
# One sent earlier is found by the receive itself, which looks as it starts waiting; as
# that look may fail (DBOS logs it and waits on), every so often a pass reads them all.
SINCE_MARGIN_MS = 10_000
EVERY_MESSAGE_SECONDS = 2.0
UNCONSUMED_INDEX = "sd_notifications_unconsumed"


def index_unconsumed(sys_db: Any) -> None:
    """The partial index the poll reads by: only messages not yet consumed, by time (made
    once DBOS has made its tables; a DBOS migration that rebuilds the table drops it, and
    the next launch makes it again)."""
    table = sys_db.tables.notifications
    index = sa.Index(
        UNCONSUMED_INDEX,
        table.c.created_at_epoch_ms,
        sqlite_where=table.c.consumed == False,  # noqa: E712
    )
    try:
        # IF NOT EXISTS: processes that launch together on one store each make it.
        with sys_db.engine.begin() as conn:
            conn.execute(sa.schema.CreateIndex(index, if_not_exists=True))
    except sa.exc.SQLAlchemyError as exc:
        # Without it the poll reads the whole table: slower, still right.
        logging.getLogger(__name__).warning("could not index unconsumed messages: %s", exc)


def _sqlite_listener(sys_db: Any) -> None:
    """DBOS's notification poller on SQLite, with one read a pass, of the messages sent
    since the last.

    DBOS's own poller checks each waiter in a transaction of its own, every poll (50 ms
    here): 1,000 sessions in a `wait` were 20,000 write transactions a second (our SQLite
    connections begin IMMEDIATE), which held the write lock from every session's own
    writes. Looking each waiter up, even a batch per statement, still cost the process
    more the more sessions waited: 29 % of its time with 2,000 waiting. This reads, through
    a partial index, the few messages not yet consumed that came since the last pass and
    wakes their waiters, if any wait here; the recv itself still consumes the message.
    Workflow events and streams (which swarmdeck does not wait on) are left to the
    per-entry check.
    """
    notifications = sys_db.tables.notifications
    # No DISTINCT: with it SQLite walks DBOS's (destination, topic) index, every row.
    recent = sa.select(notifications.c.destination_uuid, notifications.c.topic).where(
        notifications.c.consumed == False,  # noqa: E712
        notifications.c.created_at_epoch_ms >= sa.bindparam("since"),
    )
    interval = sys_db._notification_listener_polling_interval_sec
    since, every_at = 0, 0
    while sys_db._run_background_processes:
        time.sleep(interval)
        try:
            started = int(time.time() * 1000)
            if started >= every_at:
                since, every_at = 0, started + int(EVERY_MESSAGE_SECONDS * 1000)
            with sys_db.engine.connect() as conn:  # a read: no write lock
                found = {(row[0], row[1]) for row in conn.execute(recent, {"since": since})}
            since = started - SINCE_MARGIN_MS
            for destination, topic in found:
                signal = sys_db.notifications_map.get(sys_db._waiter(destination, topic)[0])
                if signal is not None:
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
