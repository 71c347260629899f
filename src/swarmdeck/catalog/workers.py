"""The worker registry: who is alive, and atomically claiming the work of the dead."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from swarmdeck.catalog import schema

HEARTBEAT_STALE_SECONDS = 30.0


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of a pid (Linux), so a recycled pid is not taken for alive."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 counted after the ")" that closes the command name.
    return stat.rsplit(")", 1)[1].split()[19]


def pid_alive(pid: int, start: str | None) -> bool:
    """True when the pid runs and is the same process that registered."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    current = process_start_time(pid)
    if current is None:
        return True
    return start is None or current == start


@dataclass
class WorkerRow:
    """A registered executor."""

    executor_id: str
    hostname: str
    pid: int
    pid_start: str | None
    heartbeat_at: float
    stopped: bool
    recovered_by: str | None

    def alive(self, now: float, here: str) -> bool:
        """Alive when not stopped and its pid runs (same host) or its heartbeat is fresh."""
        if self.stopped:
            return False
        if self.hostname == here:
            return pid_alive(self.pid, self.pid_start)
        return now - self.heartbeat_at < HEARTBEAT_STALE_SECONDS


class WorkerRegistry:
    """Rows in sd_workers, one per process that ran the engine."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.hostname = socket.gethostname()

    def register(self, executor_id: str) -> None:
        """Record this process as a live executor."""
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
                )
            )

    def heartbeat(self, executor_id: str) -> None:
        """Say this executor is still alive."""
        with self.engine.begin() as conn:
            conn.execute(
                schema.workers.update()
                .where(schema.workers.c.executor_id == executor_id)
                .values(heartbeat_at=time.time())
            )

    def stop(self, executor_id: str) -> None:
        """Mark a clean exit; its unfinished sessions become claimable at once."""
        with self.engine.begin() as conn:
            conn.execute(
                schema.workers.update()
                .where(schema.workers.c.executor_id == executor_id)
                .values(stopped=True)
            )

    def rows(self) -> list[WorkerRow]:
        """Every executor not yet recovered."""
        with self.engine.connect() as conn:
            result = conn.execute(
                sa.select(schema.workers).where(schema.workers.c.recovered_by.is_(None))
            )
            return [
                WorkerRow(
                    r.executor_id,
                    r.hostname,
                    r.pid,
                    r.pid_start,
                    r.heartbeat_at,
                    bool(r.stopped),
                    r.recovered_by,
                )
                for r in result
            ]

    def crashed(self) -> list[str]:
        """Executors that died without a clean exit and whose work nobody took over yet."""
        now = time.time()
        return [
            w.executor_id for w in self.rows() if not w.stopped and not w.alive(now, self.hostname)
        ]

    def alive(self) -> list[WorkerRow]:
        """Executors that are running now."""
        now = time.time()
        return [w for w in self.rows() if w.alive(now, self.hostname)]

    def claim_dead(self, claimer: str) -> list[str]:
        """Atomically take over every dead or stopped executor; returns the ids won."""
        now = time.time()
        won: list[str] = []
        for row in self.rows():
            if row.executor_id == claimer or row.alive(now, self.hostname):
                continue
            with self.engine.begin() as conn:
                claimed = conn.execute(
                    schema.workers.update()
                    .where(
                        schema.workers.c.executor_id == row.executor_id,
                        schema.workers.c.recovered_by.is_(None),
                    )
                    .values(recovered_by=claimer)
                ).rowcount
            if claimed == 1:
                won.append(row.executor_id)
        return won
