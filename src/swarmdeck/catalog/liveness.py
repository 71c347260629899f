"""Whether a registered executor is alive: its lease, and on its own host its pid.

Plain Python (no SQLAlchemy), so the fleet path of `dispatch` can ask it cheaply.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _stat_field(pid: int, index: int) -> str | None:
    """One field of /proc/PID/stat (Linux), counted from the state (field 3) after the ")"
    that closes the command name, which may hold spaces; None if unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[index]


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of a pid (Linux), so a recycled pid is not taken for alive."""
    return _stat_field(pid, 19)  # field 22


# How many leases a process on this host that runs (not stopped) may go without a beat
# before it counts as hung: loaded with a thousand sessions, a worker's beat can wait
# seconds for SQLite's write lock (its busy handler sleeps up to 100 ms between tries and
# loses the lock to the busy writers), and taking a busy worker over re-asks its turns.
BUSY_LEASES = 10


def process_state(pid: int) -> str | None:
    """The kernel's one-letter state of a pid (R, S, D, T, Z...), or None if unreadable."""
    return _stat_field(pid, 0)  # field 3


def pid_alive(pid: int, start: str | None) -> bool:
    """True when the pid runs and is the same process that registered."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if process_state(pid) in ("Z", "X"):
        return False
    current = process_start_time(pid)
    if current is None:
        return True
    return start is None or current == start


def pid_running(pid: int, start: str | None) -> bool:
    """True when the pid is alive and not stopped (SIGSTOP, a debugger's stop)."""
    return pid_alive(pid, start) and process_state(pid) not in ("T", "t")


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
        when its lease lapses. On this host a lapsed lease ends a stopped process only; one
        that runs is busy, and is taken for hung after BUSY_LEASES. A stopped or taken-over
        executor is never alive again."""
        if self.stopped or self.recovered_by is not None:
            return False
        silent = now - self.heartbeat_at
        if self.hostname != here:
            return silent < lease_s
        if silent < lease_s:
            return pid_alive(self.pid, self.pid_start)
        return silent < BUSY_LEASES * lease_s and pid_running(self.pid, self.pid_start)
