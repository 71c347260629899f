"""One command through a kept executor (jail/executors.py): a request, its output read from a
pipe, its end read from its channel, a `kill` at its deadline.

Fail closed: an executor that dies while the command runs takes the command with it (its
supervisor dies by its parent-death signal, bubblewrap's pid namespace with all in it;
under Landlock the command's process group is killed from here), and the call fails with
ExecutorGoneError. The command never runs outside its sandbox: the executor is its only
way in. One that dies before the command started (no `pid` came) leaves it to another.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from dataclasses import dataclass

from swarmdeck.errors import ToolError
from swarmdeck.tools.jail.capture import DRAIN_GRACE_S, REAP_GRACE_S, Capture, pump
from swarmdeck.tools.jail.executors import START_TIMEOUT_S, Executor


class ExecutorGoneError(ToolError):
    """The executor that ran a command died while it ran: the command was stopped."""


@dataclass(frozen=True)
class Ended:
    """How a command ended: its exit code as the one-shot path reports it, and whether it
    was killed at its deadline."""

    exit_code: int
    timed_out: bool


def _umask() -> int:
    """This process's umask, read without setting it (other threads create files)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def _exit_code(status: int, timed_out: bool, runner: str) -> int:
    """The wait status as the one-shot path returned it: bubblewrap exits 128+N for a
    command killed by signal N, the launcher dies by it (-N); a killed run is -N for both."""
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    sig = os.WTERMSIG(status)
    return 128 + sig if runner == "bwrap" and not timed_out else -sig


async def _status(channel: asyncio.StreamReader, timeout_s: float) -> int | None:
    """The command's wait status; None if the channel ended without it."""
    line = await asyncio.wait_for(channel.readline(), timeout_s)
    return int(line.split()[1]) if line.startswith(b"exit ") else None


async def _follow(
    channel: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout_s: float
) -> tuple[int | None, bool]:
    """Wait for the command's end; at the deadline ask its supervisor to kill its tree.
    (wait status or None if the executor died, timed out)."""
    try:
        return await _status(channel, timeout_s), False
    except TimeoutError:
        pass
    with contextlib.suppress(OSError):
        writer.write(b"kill")
        await writer.drain()
    try:
        return await _status(channel, REAP_GRACE_S), True
    except TimeoutError:
        return None, True


async def _started(channel: asyncio.StreamReader) -> int | None:
    """The supervisor's pid (its process group's), or None if the executor ended first: it
    says so before it forks the command, so a None means the command never started."""
    try:
        line = await asyncio.wait_for(channel.readline(), START_TIMEOUT_S)
    except TimeoutError:
        # It may start yet: not run elsewhere. Our end closing makes it kill the command.
        raise ExecutorGoneError(
            f"the sandbox's executor did not start the command within {START_TIMEOUT_S:g} s; "
            "a new one takes the next command; run it again"
        ) from None
    return int(line.split()[1]) if line.startswith(b"pid ") else None


async def run_kept(
    executor: Executor,
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str,
    timeout_s: float,
    capture: Capture,
) -> Ended | None:
    """Run argv in `executor`, its output fed to `capture`. None when the executor was gone
    before the command started (it never ran: another executor may run it)."""
    request = {"argv": argv, "env": env, "cwd": cwd, "umask": _umask()}
    out_read, out_write = os.pipe()
    ours, theirs = socket.socketpair()
    try:
        executor.send(request, out_write, theirs)
    except OSError:
        os.close(out_read)
        ours.close()
        return None
    finally:
        os.close(out_write)
        theirs.close()
    loop = asyncio.get_running_loop()
    output = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(output), os.fdopen(out_read, "rb", buffering=0)
    )
    reader = asyncio.create_task(pump(output, capture))
    channel, writer = await asyncio.open_unix_connection(sock=ours)
    try:
        return await _outcome(executor, channel, writer, timeout_s, reader)
    finally:
        # Our end of the channel closing is a `kill` to the supervisor (a cancelled call).
        writer.close()
        if not reader.done():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        transport.close()


async def _outcome(
    executor: Executor,
    channel: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    timeout_s: float,
    reader: asyncio.Task[None],
) -> Ended | None:
    group = await _started(channel)
    if group is None:
        return None
    status, timed_out = await _follow(channel, writer, timeout_s)
    runner = executor.layout.runner
    if status is None:
        if runner != "bwrap":  # bubblewrap's pid namespace ended with its executor
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        raise ExecutorGoneError(
            "the sandbox's executor ended while the command ran; the command was stopped "
            "(it never runs outside the sandbox); run it again: a new executor starts"
        )
    # The supervisor killed whatever the command left; what still holds the pipe escaped
    # nothing, yet stop reading after a grace.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(reader), DRAIN_GRACE_S)
    return Ended(_exit_code(status, timed_out, runner), timed_out)
