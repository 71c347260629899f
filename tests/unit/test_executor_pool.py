"""The kept executors' pool (tools/jail/executors.py) where the world is hard to reach: a
start slow enough to be cancelled while queued, and an executor that failed one command
while a sub-agent's command still runs in it."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from swarmdeck.tools.jail import executors
from swarmdeck.tools.jail.command import Layout

FIRST, SECOND = Layout("bwrap", ("first",)), Layout("bwrap", ("second",))


def key(layout: Layout, run_dir: str) -> executors.Key:
    return (layout.runner, layout.args, (), run_dir)


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A pool of this test's own, its starts slow and failing (no sandbox needed)."""

    def slow_failing_start(_self: object, *_args: object) -> executors.Executor:
        time.sleep(0.3)
        raise executors.StartError("no executor here")

    monkeypatch.setattr(executors, "_POOL", executors._Pool())
    monkeypatch.setattr(executors._Pool, "_start", slow_failing_start)
    yield
    executors.stop_all()


@pytest.mark.usefixtures("pool")
async def test_a_start_cancelled_while_queued_leaves_the_pool_working() -> None:
    first = asyncio.create_task(executors.acquire(key(FIRST, "/r1"), FIRST, {}))
    await asyncio.sleep(0.05)
    # One thread starts them all: the second start waits behind the first.
    second = asyncio.create_task(executors.acquire(key(SECOND, "/r2"), SECOND, {}))
    await asyncio.sleep(0.05)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert await first is None  # it could not start: the one-shot path runs the command
    # The pool still answers: a start that cannot run says so, nothing raises.
    assert await executors.acquire(key(SECOND, "/r2"), SECOND, {}) is None
    executors.stop_run_dir("/r2")
    executors.stop_all()


def shared_executor() -> executors.Executor:
    """An executor that two commands (a parent's and its sub-agent's) are using."""
    proc = subprocess.Popen(["sleep", "30"])
    ours, theirs = socket.socketpair()
    theirs.close()
    executor = executors.Executor(FIRST, "/r1", proc, ours)
    executor.busy = 2
    return executor


def test_a_failed_command_leaves_a_siblings_command_running() -> None:
    executor = shared_executor()
    executors.release(executor, failed=True)
    # Handed out no more, but the other command still runs in it.
    assert not executor.alive and executor.control.fileno() != -1
    executors.release(executor)
    assert executor.control.fileno() == -1  # the last one out stopped it
    executor.proc.kill()
    executor.proc.wait()


def test_a_dead_executor_is_stopped_at_once() -> None:
    executor = shared_executor()
    executor.proc.kill()
    executor.proc.wait()
    executors.release(executor, failed=True)
    assert executor.control.fileno() == -1
