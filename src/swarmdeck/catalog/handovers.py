"""Sessions handed to the fleet and the executors that run them: claims, queue, counts."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.access import StoreAccess
from swarmdeck.catalog.direct import HANDOVER_CHANNEL
from swarmdeck.catalog.records import TERMINAL_STATUSES, SessionRecord


class HandoverTables(StoreAccess):
    """Hand-overs of sessions between executors (sd_sessions.executor)."""

    def take_handover(
        self, executor: str, limit: int, runners: Sequence[str] = ()
    ) -> list[tuple[str, int]]:
        """Claim up to `limit` sessions handed to the fleet (pending, no executor) for this
        executor, oldest first; returns (id, generation) of those won (another worker may
        win some). One statement: a claim per session was a write transaction each, in a
        store that every session's own writes wait on.

        A session of an external runner is taken only by a worker that has that runner
        (`runners`): the option is matched in the stored JSON text, which every writer
        serialises with json.dumps's default separators.
        """
        sessions = schema.sessions
        needs_runner = sessions.c.options.like('%"runner": "%')
        can_run = sa.or_(
            ~needs_runner, *(sessions.c.options.like(f'%"runner": "{n}"%') for n in runners)
        )
        with self._reads.connect() as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    sa.select(sessions.c.id)
                    .where(sessions.c.status == "pending", sessions.c.executor.is_(None), can_run)
                    .order_by(sessions.c.created_at)
                    .limit(limit)
                )
            ]
        if not ids:
            return []
        with self.engine.begin() as conn:
            won = dict(
                conn.execute(
                    sessions.update()
                    .where(
                        sessions.c.id.in_(ids),
                        sessions.c.executor.is_(None),
                        sessions.c.status == "pending",
                    )
                    .values(executor=executor)
                    .returning(sessions.c.id, sessions.c.generation)
                ).all()
            )
        return [(sid, won[sid]) for sid in ids if sid in won]  # oldest first, as listed

    def still_held_by(self, executors: list[str]) -> bool:
        """Whether a live session is still held by one of these executors (taken over, its
        new execution has not claimed it yet)."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            held = sa.exists().where(
                sessions.c.executor.in_(executors), sessions.c.status.not_in(TERMINAL_STATUSES)
            )
            return bool(conn.execute(sa.select(held)).scalar())

    def running_by_executor(self) -> dict[str, int]:
        """How many live sessions each executor runs (pending ones are not running yet)."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(sessions.c.executor, sa.func.count())
                .where(
                    sessions.c.executor.is_not(None),
                    sessions.c.status.not_in([*TERMINAL_STATUSES, "pending"]),
                )
                .group_by(sessions.c.executor)
            ).all()
        return {r[0]: r[1] for r in rows}

    def queue_depth(self) -> tuple[int, int]:
        """Sessions waiting to run: all pending ones, and of them those handed to the fleet
        that no worker took yet."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(sessions.c.executor.is_(None), sa.func.count())
                .where(sessions.c.status == "pending")
                .group_by(sessions.c.executor.is_(None))
            ).all()
        counts = {bool(r[0]): r[1] for r in rows}
        return sum(counts.values()), counts.get(True, 0)

    def pending_of(self, executors: list[str]) -> list[SessionRecord]:
        """Sessions still pending that these executors were to start."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(sessions).where(
                    sessions.c.status == "pending", sessions.c.executor.in_(executors)
                )
            )
            return [SessionRecord.from_row(r) for r in rows]

    def cancelled_since(self, since: float, executor: str) -> list[str]:
        """Sessions run by this executor that were cancelled since a time."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(sessions.c.id).where(
                    sessions.c.executor == executor,
                    sessions.c.status == "cancelled",
                    sessions.c.updated_at >= since,
                )
            ).all()
        return [r[0] for r in rows]

    def notify_handover(self) -> None:
        """Tell the workers listening (PostgreSQL) that a session was handed to the fleet;
        on SQLite they look often instead."""
        if not self.is_sqlite:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(f"NOTIFY {HANDOVER_CHANNEL}")
