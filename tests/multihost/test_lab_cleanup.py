"""The namespaced lab leaves nothing behind: its namespaces, links and processes go when it
closes, and those of a run killed before its teardown go when the next lab starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests import netns

pytestmark = pytest.mark.multihost

KILLED_RUN = """
import os, sys
from tests.netns import Lab
lab = Lab({"PATH": os.environ["PATH"]})
lab.add_host("x", 40)
print(lab.hosts["x"].holder.pid, flush=True)
sys.stdin.read()
"""


def lab_namespaces(owner: int) -> list[str]:
    """The network namespaces of the lab a process owns."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in listed.splitlines() if ln.startswith(f"{netns.PREFIX}{owner}-")]


@pytest.fixture(autouse=True)
def namespaces_available() -> None:
    reason = netns.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def test_a_closed_lab_and_a_killed_one_leave_no_namespace_or_process() -> None:
    run = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert run.stdout is not None
    holder = int(run.stdout.readline())
    assert sorted(lab_namespaces(run.pid)) == [
        f"{netns.PREFIX}{run.pid}-{n}" for n in ("switch", "x")
    ]
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert lab_namespaces(run.pid), "the killed run's namespaces outlived it (nothing to reap)"
    lab = netns.Lab({"PATH": os.environ["PATH"]})  # reaps what the killed run left
    try:
        assert lab_namespaces(run.pid) == []
        assert not netns.process_alive(holder)
        lab.add_host("y", 41)
        assert len(lab_namespaces(os.getpid())) == 2
    finally:
        lab.close()
    assert lab_namespaces(os.getpid()) == []
