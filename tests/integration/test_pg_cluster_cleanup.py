"""The throwaway PostgreSQL cluster never outlives the run that started it: an interrupted
run (SIGINT, SIGTERM) stops it on the way out, and one killed outright (SIGKILL) has it
removed by the next run's start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import pgcluster

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]
# A child that starts a cluster as the suite's fixture does, says where, and waits.
OWNER = (
    "import time\n"
    "from tests.pgcluster import PgCluster\n"
    "cluster = PgCluster.start()\n"
    "print(cluster.root, flush=True)\n"
    "time.sleep(600)\n"
)


@pytest.fixture(autouse=True)
def _postgres_here() -> None:
    reason = pgcluster.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def _start_owner() -> tuple[subprocess.Popen[str], Path, int]:
    """The child, its cluster's directory and the server's pid."""
    child = subprocess.Popen(
        [sys.executable, "-c", OWNER],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    assert line, f"the child started no cluster (exit {child.wait()})"
    root = Path(line)
    postmaster = int((root / "data" / "postmaster.pid").read_text().split()[0])
    return child, root, postmaster


def _running(pid: int) -> bool:
    """Whether the server runs: a zombie (an init that reaps slowly, or never, in a
    container) has ended."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_owner_stops_its_cluster(signum: signal.Signals) -> None:
    child, root, postmaster = _start_owner()
    child.send_signal(signum)
    child.wait(timeout=60)
    # The child waited for pg_ctl's immediate stop before it ended: nothing is left.
    assert not _running(postmaster), f"postgres {postmaster} outlived its owner's {signum.name}"
    assert not root.exists()


def test_a_killed_owners_cluster_goes_at_the_next_start() -> None:
    child, root, postmaster = _start_owner()
    try:
        child.kill()
        child.wait(timeout=60)
        # SIGKILL leaves no chance to clean up: the server runs on (its parent is now 1).
        assert _running(postmaster)
        bin_dir = pgcluster.find_bin_dir()
        assert bin_dir is not None
        pgcluster.reap_stale_clusters(bin_dir, pgcluster._run_as())
        assert not _running(postmaster)
        assert not root.exists()
    finally:
        if _running(postmaster):
            os.kill(postmaster, signal.SIGKILL)


def test_an_owner_file_naming_a_reused_pid_is_stale(tmp_path: Path) -> None:
    mark = pgcluster.owner_mark(os.getpid())
    assert pgcluster.owner_alive(mark)
    pid, started = mark.split()
    # The same pid, started at another time: another process took the number.
    assert not pgcluster.owner_alive(f"{pid} {int(started) + 1}")
    # A zombie, whose parent has not reaped it yet, is dead too.
    zombie = subprocess.Popen(["true"])
    while (pgcluster._process_state(zombie.pid) or ("Z",))[0] != "Z":
        time.sleep(0.01)  # until `true` has ended; nobody has waited for it yet
    assert not pgcluster.owner_alive(str(zombie.pid))
    zombie.wait()
