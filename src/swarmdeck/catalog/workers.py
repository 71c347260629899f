"""The worker registry: who is alive (a lease per executor), and atomically claiming the
work of the dead."""

from __future__ import annotations

import os
import socket
import time

import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.liveness import WorkerRow, process_start_time
from swarmdeck.catalog.records import SessionRecord
from swarmdeck.config import LEASE_SECONDS

# A taken-over executor is looked at again for this long: a worker that was only paused
# may have started a session in the moment between waking and seeing its lease lost.
SWEEP_SECONDS = 30.0
# Rows of executors taken over longer ago than this are deleted.
FORGET_SECONDS = 24 * 3600.0


def _row(r: sa.Row) -> WorkerRow:
    return WorkerRow(
        r.executor_id,
        r.hostname,
        r.pid,
        r.pid_start,
        r.started_at,
        r.heartbeat_at,
        bool(r.stopped),
        r.recovered_by,
        r.recovered_at,
        r.role or "local",
        r.sandbox,
        r.sandbox_reason,
    )


class WorkerRegistry:
    """Rows in sd_workers, one per process that ran the engine."""

    def __init__(
        self, engine: sa.Engine, hostname: str | None = None, lease_s: float = LEASE_SECONDS
    ) -> None:
        self.engine = engine
        self.hostname = hostname or socket.gethostname()
        self.lease_s = lease_s

    def register(
        self,
        executor_id: str,
        role: str = "local",
        sandbox: str | None = None,
        sandbox_reason: str | None = None,
    ) -> None:
        """Record this process as a live executor, its lease starting now (with the sandbox
        its tools run in, when it serves the fleet)."""
        now = time.time()
        pid = os.getpid()
        with self.engine.begin() as conn:
            conn.execute(
                schema.workers.insert().values(
                    executor_id=executor_id,
                    hostname=self.hostname,
                    pid=pid,
                    pid_start=process_start_time(pid),
                    started_at=now,
                    heartbeat_at=now,
                    stopped=False,
                    role=role,
                    sandbox=sandbox,
                    sandbox_reason=sandbox_reason,
                )
            )

    def heartbeat(self, executor_id: str) -> bool:
        """Renew the executor's lease; False when it was lost (taken over, or stopped)."""
        w = schema.workers.c
        with self.engine.begin() as conn:
            renewed = conn.execute(
                schema.workers.update()
                .where(w.executor_id == executor_id, w.recovered_by.is_(None), ~w.stopped)
                .values(heartbeat_at=time.time())
            ).rowcount
        return renewed == 1

    def stop(self, executor_id: str, *, left_work: bool = True) -> None:
        """Mark a clean exit; its unfinished sessions become claimable at once. An executor
        that leaves no work closes its own row: nobody takes it over (or says so), and the
        workers list forgets it."""
        done = {} if left_work else {"recovered_by": executor_id, "recovered_at": time.time()}
        with self.engine.begin() as conn:
            conn.execute(
                schema.workers.update()
                .where(schema.workers.c.executor_id == executor_id)
                .values(stopped=True, **done)
            )

    def rows(self) -> list[WorkerRow]:
        """Every executor not yet taken over."""
        with self.engine.connect() as conn:
            result = conn.execute(
                sa.select(schema.workers).where(schema.workers.c.recovered_by.is_(None))
            )
            return [_row(r) for r in result]

    def get(self, executor_id: str) -> WorkerRow | None:
        """One executor's row, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(schema.workers).where(schema.workers.c.executor_id == executor_id)
            ).first()
        return _row(row) if row else None

    def is_alive(self, row: WorkerRow) -> bool:
        """Whether this executor runs now (its lease holds; on this host, its pid runs)."""
        return row.alive(time.time(), self.hostname, self.lease_s)

    def orphaned(self, records: list[SessionRecord]) -> set[str]:
        """Of these sessions, those whose executor died (or stopped) and that nobody has
        taken over yet: no live process runs them now."""
        rows = {w.executor_id: w for w in self.rows()}
        found = set()
        for r in records:
            row = rows.get(r.executor or "")
            if not r.terminal and row is not None and not self.is_alive(row):
                found.add(r.id)
        return found

    def crashed(self) -> list[str]:
        """Executors that died without a clean exit and whose work nobody took over yet."""
        return [w.executor_id for w in self.rows() if not w.stopped and not self.is_alive(w)]

    def alive(self, role: str | None = None) -> list[WorkerRow]:
        """Executors that are running now (of this role)."""
        return [w for w in self.rows() if self.is_alive(w) and role in (None, w.role)]

    def claim_dead(self, claimer: str) -> list[str]:
        """Atomically take over every dead or stopped executor; returns the ids won."""
        won: list[str] = []
        w = schema.workers.c
        for row in self.rows():
            if row.executor_id == claimer or self.is_alive(row):
                continue
            with self.engine.begin() as conn:
                # The lease is checked again in the claim: a beat that landed since the
                # read above means the executor lives.
                claimed = conn.execute(
                    schema.workers.update()
                    .where(
                        w.executor_id == row.executor_id,
                        w.recovered_by.is_(None),
                        w.heartbeat_at == row.heartbeat_at,
                    )
                    .values(recovered_by=claimer, recovered_at=time.time())
                ).rowcount
            if claimed == 1:
                won.append(row.executor_id)
        return won

    def recently_taken_over(self) -> list[str]:
        """Executors taken over within SWEEP_SECONDS: looked at again for late work."""
        w = schema.workers.c
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(w.executor_id).where(w.recovered_at > time.time() - SWEEP_SECONDS)
            ).all()
        return [r[0] for r in rows]

    def taken_over_since(self, since: float) -> list[WorkerRow]:
        """Executors taken over since this time (their sessions moved to another worker)."""
        w = schema.workers.c
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(schema.workers).where(w.recovered_at > since)).all()
        return [_row(r) for r in rows]

    def forget_old(self) -> int:
        """Delete the rows of executors taken over long ago; returns how many."""
        w = schema.workers.c
        with self.engine.begin() as conn:
            return conn.execute(
                schema.workers.delete().where(w.recovered_at < time.time() - FORGET_SECONDS)
            ).rowcount
