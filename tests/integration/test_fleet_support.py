"""Helpers of the fleet tests (integration and chaos): `swarmdeck worker` processes with
host names of their own, started, paused, killed and cleaned up.

Holds no tests itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from tests.conftest import FORK_ENV, STORE_ENV, cli_env, cli_fork_server
from tests.integration.test_sessions_support import CliProcess, wait_for

WORKER_LINE = re.compile(r"^worker (\S+) on ", re.MULTILINE)
START_TIMEOUT_S = 90.0
# `python -m swarmdeck`, with the package claiming another version before anything reads it.
AS_RELEASE = (
    "import runpy, swarmdeck; swarmdeck.__version__ = {release!r}; "
    "runpy.run_module('swarmdeck', run_name='__main__')"
)


@dataclass
class WorkerProc:
    """One `swarmdeck worker` process and the log of its stderr."""

    proc: CliProcess
    hostname: str
    log: Path

    def output(self) -> str:
        """What the worker printed so far."""
        return self.log.read_text(errors="replace")

    def executor_ids(self) -> list[str]:
        """The executor ids it ran as, oldest first (a worker that lost its lease starts
        again as a new one)."""
        return WORKER_LINE.findall(self.output())

    @property
    def executor_id(self) -> str:
        """The executor id it runs as now."""
        return self.executor_ids()[-1]

    def signal(self, sig: int) -> None:
        """Send a signal to the worker (and its tools: its process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)


@dataclass
class Fleet:
    """The workers a test started; all are killed when it ends."""

    home: Path
    workers: list[WorkerProc] = field(default_factory=list)

    def start(
        self, hostname: str, *args: str, release: str | None = None, **env: str
    ) -> WorkerProc:
        """Start a worker as if on host `hostname` (and, given a `release`, as if that
        version of swarmdeck were installed); returns once it serves the store."""
        log = self.home.parent / f"worker-{hostname}-{len(self.workers)}.log"
        argv = [sys.executable, "-m", "swarmdeck", "worker", *args]
        if release is not None:
            argv = [sys.executable, "-c", AS_RELEASE.format(release=release), "worker", *args]
        worker_env = cli_env(self.home, SWARMDECK_HOSTNAME=hostname, **env)
        with log.open("wb") as handle:
            if release is None and os.environ.get(FORK_ENV) != "0":
                proc: CliProcess = cli_fork_server().start(
                    ["worker", *args], worker_env, new_session=True, output=handle
                )
            else:
                proc = subprocess.Popen(
                    argv,
                    env=worker_env,
                    stdin=subprocess.DEVNULL,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        worker = WorkerProc(proc, hostname, log)
        self.workers.append(worker)
        wait_for(
            lambda: worker.executor_ids() or proc.poll() is not None,
            timeout=START_TIMEOUT_S,
            what=f"worker on {hostname} to start",
        )
        assert proc.poll() is None, f"worker on {hostname} exited:\n{worker.output()}"
        return worker

    def kill(self, worker: WorkerProc) -> None:
        """SIGKILL a worker with its tools; reap it."""
        worker.signal(signal.SIGKILL)
        worker.proc.wait(timeout=30)

    def freeze(self, worker: WorkerProc) -> None:
        """SIGSTOP a worker between two of its writes. Stopped inside one, it would keep the
        store locked (SQLite's write lock, or PostgreSQL's row locks) and stall every
        process that writes: a test of a frozen worker means one that holds nothing."""
        deadline = time.monotonic() + 30
        while True:
            worker.signal(signal.SIGSTOP)
            if not _store_held(self.home) or time.monotonic() > deadline:
                return
            worker.signal(signal.SIGCONT)
            time.sleep(0.02)

    def close(self) -> None:
        """Kill every worker still running (a paused one is woken first, so it can die)."""
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.signal(signal.SIGCONT)
                worker.signal(signal.SIGKILL)
                worker.proc.wait(timeout=30)


@pytest.fixture
def fleet(sd_home: Path) -> Iterator[Fleet]:
    """Start workers for this test; they are killed at its end."""
    started = Fleet(sd_home)
    try:
        yield started
    finally:
        started.close()


def _store_held(home: Path) -> bool:
    """True while a transaction of another process is open on the test's store."""
    url = os.environ.get(STORE_ENV)
    if url is None:
        return any(_sqlite_write_locked(path) for path in home.glob("*.sqlite"))
    with psycopg.connect(url, autocommit=True) as conn:
        open_transactions = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
        ).fetchone()
    return bool(open_transactions and open_transactions[0])


def _sqlite_write_locked(path: Path) -> bool:
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


def executor_of(catalog: Catalog, session_id: str) -> str | None:
    """The executor a session was last run by."""
    return catalog.get_session(session_id).executor


def worker_rows(catalog: Catalog) -> dict[str, sa.Row]:
    """Every row of sd_workers, by executor id."""
    with catalog.engine.connect() as conn:
        return {r.executor_id: r for r in conn.execute(sa.select(schema.workers))}
