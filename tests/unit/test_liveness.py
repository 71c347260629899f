"""Whether a worker on this host is alive when its beats stopped landing: a busy process
(its beat kept from SQLite's write lock) is, a stopped or dead one is not, and a running
one that stays silent long enough is taken for hung."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from swarmdeck.catalog.liveness import (
    BUSY_LEASES,
    WorkerRow,
    process_start_time,
    process_state,
)

LEASE = 3.0
HERE = socket.gethostname()


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def row(proc: subprocess.Popen[bytes], silent_s: float, host: str = HERE) -> WorkerRow:
    now = time.time()
    return WorkerRow(
        executor_id="w",
        hostname=host,
        pid=proc.pid,
        pid_start=process_start_time(proc.pid),
        started_at=now - 100,
        heartbeat_at=now - silent_s,
        stopped=False,
        recovered_by=None,
        recovered_at=None,
        role="worker",
    )


def test_a_busy_process_here_outlives_its_lease_until_it_counts_as_hung(
    child: subprocess.Popen[bytes],
) -> None:
    now = time.time()
    assert row(child, 0.0).alive(now, HERE, LEASE)
    assert row(child, 2 * LEASE).alive(now, HERE, LEASE)  # busy, not dead
    assert not row(child, BUSY_LEASES * LEASE + 1).alive(now, HERE, LEASE)  # hung
    # Elsewhere only the lease can tell: it lapses, the worker is taken over.
    assert not row(child, 2 * LEASE, host="elsewhere.invalid").alive(now, HERE, LEASE)


def test_a_stopped_or_dead_process_here_is_not_alive_once_its_lease_lapses(
    child: subprocess.Popen[bytes],
) -> None:
    child.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while process_state(child.pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    now = time.time()
    assert row(child, 0.0).alive(now, HERE, LEASE)  # stopped within its lease: still counted
    assert not row(child, 2 * LEASE).alive(now, HERE, LEASE)
    child.send_signal(signal.SIGCONT)
    stale = row(child, 0.0)
    child.kill()
    child.wait()
    assert not stale.alive(time.time(), HERE, LEASE)  # a dead pid here is seen at once
