"""The supervisor registry: `swarmdeck worker --processes N` processes, and the count of
worker processes each should keep (others may write a new count; the supervisor scales)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import sqlalchemy as sa

from swarmdeck.catalog import schema


@dataclass
class SupervisorRow:
    """A registered supervisor."""

    supervisor_id: str
    hostname: str | None
    pid: int | None
    processes: int
    heartbeat_at: float
    stopped: bool

    def live(self, now: float, lease_s: float) -> bool:
        """Not stopped, and its last beat within the lease (it beats every second)."""
        return not self.stopped and now - self.heartbeat_at < lease_s


class SupervisorRegistry:
    """Rows in sd_supervisors."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def register(self, supervisor_id: str, hostname: str, processes: int) -> None:
        """Record this process as a supervisor keeping `processes` workers."""
        with self.engine.begin() as conn:
            conn.execute(
                schema.supervisors.insert().values(
                    supervisor_id=supervisor_id,
                    hostname=hostname,
                    pid=os.getpid(),
                    processes=processes,
                    heartbeat_at=time.time(),
                    stopped=False,
                )
            )

    def beat(self, supervisor_id: str) -> int | None:
        """Say this supervisor lives; returns the count of processes it should keep (None
        when its row is gone)."""
        table = schema.supervisors
        with self.engine.begin() as conn:
            conn.execute(
                table.update()
                .where(table.c.supervisor_id == supervisor_id)
                .values(heartbeat_at=time.time())
            )
            return conn.execute(
                sa.select(table.c.processes).where(table.c.supervisor_id == supervisor_id)
            ).scalar()

    def set_processes(self, supervisor_id: str, processes: int) -> bool:
        """Ask a supervisor to keep this many worker processes; False when it is not there."""
        table = schema.supervisors
        with self.engine.begin() as conn:
            changed = conn.execute(
                table.update()
                .where(table.c.supervisor_id == supervisor_id)
                .values(processes=processes)
            ).rowcount
        return changed == 1

    def stop(self, supervisor_id: str) -> None:
        """Mark a clean exit."""
        table = schema.supervisors
        with self.engine.begin() as conn:
            conn.execute(
                table.update().where(table.c.supervisor_id == supervisor_id).values(stopped=True)
            )

    def rows(
        self, live_within_s: float | None = None, *, stopped_too: bool = False
    ) -> list[SupervisorRow]:
        """Supervisors not stopped (whose heartbeat is this recent, when given); with
        `stopped_too`, every row."""
        table = schema.supervisors
        q = sa.select(table)
        if not stopped_too:
            q = q.where(~table.c.stopped)
        if live_within_s is not None:
            q = q.where(table.c.heartbeat_at > time.time() - live_within_s)
        with self.engine.connect() as conn:
            return [
                SupervisorRow(
                    r.supervisor_id, r.hostname, r.pid, r.processes, r.heartbeat_at, bool(r.stopped)
                )
                for r in conn.execute(q)
            ]
