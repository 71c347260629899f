"""One runner process, confined like a tool run: its JSON event lines as they come, its
stderr in a redacted log, and nothing of it left running when it ends or is stopped."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmdeck.tools.sandbox import Confined

# One event line may carry a whole file a tool read.
LINE_LIMIT = 32 * 1024 * 1024
STOP_GRACE_S = 3.0
STDERR_TAIL_LINES = 20


@dataclass(frozen=True)
class Exit:
    """How the runner's process ended."""

    code: int
    stderr_tail: str


async def run_streaming(
    confined: Confined,
    cwd: Path,
    on_event: Callable[[dict[str, Any]], Awaitable[None]],
    log: Path,
    redact: Callable[[str], str],
) -> Exit:
    """Run the confined command; hand each JSON line of its stdout to `on_event`.

    A line that is not JSON goes to the log. On cancellation (a timeout, a Ctrl-C, a
    cancelled session) the process group is stopped before the cancellation goes on.
    """
    proc = await asyncio.create_subprocess_exec(
        *confined.argv,
        cwd=cwd,
        env=confined.env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        limit=LINE_LIMIT,
    )
    tail: list[str] = []
    with log.open("a", encoding="utf-8") as handle:
        os.chmod(log, 0o600)
        errors = asyncio.create_task(_drain_stderr(proc, handle, redact, tail))
        try:
            assert proc.stdout is not None
            async for raw in proc.stdout:
                line = raw.decode("utf-8", errors="replace").strip()
                event = _json_line(line)
                if event is None:
                    if line:
                        handle.write(redact(line) + "\n")
                    continue
                await on_event(event)
            code = await proc.wait()
        except BaseException:
            await _stop(proc, confined.runner)
            errors.cancel()
            raise
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(errors, STOP_GRACE_S)
    _kill_group(proc.pid)  # whatever the runner left behind in its group
    return Exit(code, "\n".join(tail[-STDERR_TAIL_LINES:]))


def _json_line(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


async def _drain_stderr(
    proc: asyncio.subprocess.Process, handle: Any, redact: Callable[[str], str], tail: list[str]
) -> None:
    assert proc.stderr is not None
    async for raw in proc.stderr:
        line = redact(raw.decode("utf-8", errors="replace").rstrip())
        handle.write(line + "\n")
        tail.append(line)
        del tail[:-STDERR_TAIL_LINES]


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _stop(proc: asyncio.subprocess.Process, runner: str) -> None:
    """Stop the runner and all it started: the launcher is asked first (it kills what it
    adopted); under bubblewrap the group's SIGKILL ends the pid namespace."""
    if proc.returncode is None and runner != "bwrap":
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), STOP_GRACE_S)
    _kill_group(proc.pid)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), STOP_GRACE_S)
