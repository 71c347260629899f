"""Whether a registered executor is alive: its lease, and on its own host its pid.

Plain Python (no SQLAlchemy), so the fleet path of `dispatch` can ask it cheaply.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


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
    started_at: float
    heartbeat_at: float
    stopped: bool
    recovered_by: str | None
    recovered_at: float | None
    role: str
    # What confines its tools (see schema.workers); None where it runs no fleet sessions.
    sandbox: str | None = None
    sandbox_reason: str | None = None

    def alive(self, now: float, here: str, lease_s: float) -> bool:
        """Alive while its lease holds (a beat landed within `lease_s`) and, on this host,
        its pid runs: a dead pid here is seen at once, a dead or frozen process elsewhere
        when its lease lapses. A stopped or taken-over executor is never alive again."""
        if self.stopped or self.recovered_by is not None:
            return False
        if now - self.heartbeat_at >= lease_s:
            return False
        return self.hostname != here or pid_alive(self.pid, self.pid_start)
