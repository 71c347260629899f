"""Following a session from the command line until it ends: its progress on stderr, a
question it asks answered from the terminal, and a Ctrl-C or SIGTERM that stops it where it
is (resumable) instead of leaving it running with nobody to follow it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

# The shell's code for a run ended by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130


async def run_and_follow(
    host: Any, session_id: str, quiet: bool = False, start: bool = True
) -> dict[str, Any]:
    """Run a session to its end in this process (started here unless `start` is False),
    printing progress unless quiet."""
    if start:
        await host.start(session_id)
    outcome = asyncio.ensure_future(host.wait(session_id))
    return await _follow(host, session_id, outcome, quiet) or {}


async def _follow(
    host: Any,
    session_id: str,
    done: asyncio.Future[Any],
    quiet: bool,
    also: Any = None,
) -> Any:
    """Print the session's progress until `done`; a question it asks is answered from here
    (even a quiet run says how: it would wait for ever otherwise). Returns `done`'s result."""
    from swarmdeck.cli.ask_prompt import AskUserPrompt
    from swarmdeck.views.progress import ProgressPrinter

    printer = ProgressPrinter()
    asker = AskUserPrompt(host, session_id, printer.console)

    def on_event(ev: Any) -> None:
        if not quiet:
            printer(ev)
        asker(ev)
        if also is not None:
            also(ev)

    try:
        await host.follow(session_id, on_event, done)
    finally:
        asker.close()
    return done.result()


def exit_code_for(status: str, reason: str | None = None) -> int:
    """0 for a completed session, 3 for one that ended otherwise or ran out of turns."""
    return 0 if status == "completed" and reason != "step_cap" else 3


async def follow_to_end(host: Any, session_id: str, quiet: bool = False) -> dict[str, Any]:
    """Follow a session another process runs, from the catalog, until it ends."""
    ended: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    def on_end(ev: Any) -> None:
        if ev.kind == "status" and ev.payload.get("reason") and not ended.done():
            ended.set_result({"status": ev.payload["status"], "reason": ev.payload["reason"]})

    return await _follow(host, session_id, ended, quiet, on_end)


@dataclass(frozen=True)
class Followed:
    """How following a session ended: its outcome, or why it was stopped from here."""

    outcome: dict[str, Any] | None
    stopped: str | None = None  # "timeout" or "interrupted"
    by: str = ""  # what interrupted it, for a person: "Ctrl-C", "SIGTERM"


async def follow_or_stop(host: Any, session_id: str, following: Any, wall: float) -> Followed:
    """Await `following` (a coroutine that follows the session to its end) unless `wall`
    seconds pass (0: no limit) or a signal comes; then stop the session where it is."""
    from swarmdeck.dispatch.drivers import stop_session
    from swarmdeck.dispatch.interrupts import watched_signals

    with watched_signals() as interrupts:
        task = asyncio.ensure_future(following)
        stopped = asyncio.ensure_future(interrupts.stop.wait())
        await asyncio.wait(
            {task, stopped}, timeout=wall if wall > 0 else None, return_when="FIRST_COMPLETED"
        )
        stopped.cancel()
        if task.done():
            return Followed(task.result())
        task.cancel()
        await asyncio.wait({task})
        if interrupts.stop.is_set():
            await stop_session(
                host, session_id, f"interrupted: stopped by swarmdeck ({interrupts.name})"
            )
            return Followed(None, "interrupted", interrupts.name)
        await stop_session(host, session_id, f"timeout: stopped by swarmdeck after {wall:g}s")
        return Followed(None, "timeout")
