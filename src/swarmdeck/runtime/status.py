"""A session's status writes: running, waiting, idle, and how a generation ended."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from swarmdeck.catalog.records import EndWrite
from swarmdeck.errors import SwarmdeckError
from swarmdeck.runtime.crashpoints import crash_point
from swarmdeck.runtime.services import services
from swarmdeck.runtime.tree import parent_notice, ring
from swarmdeck.tools.jail import executors


@dataclass(frozen=True)
class Ending:
    """How a generation of a session ended: what its end records (the verdict classifies
    on the reason)."""

    status: str
    final_text: str
    error: str | None
    reason: str
    generation: int


async def end_session(session_id: str, has_parent: bool, ending: Ending) -> None:
    """Record how the session ended, with its parent's notice, then ring the parent.

    The end and the notice are one transaction, so a parent that sees this session ended
    (wait_for_agents) finds its update in the inbox; the doorbell rings after, so a parent
    it wakes finds the session ended. Both parts are idempotent: a rerun after a crash in
    between repeats nothing.
    """
    await ring_parent(await asyncio.to_thread(_record_end, session_id, has_parent, ending))


def _record_end(session_id: str, has_parent: bool, ending: Ending) -> str | None:
    """Store the end and the parent's notice; returns the parent to ring."""
    end = end_write(session_id, has_parent, ending)
    services().catalog.end_session(session_id, end.key, end.entry, end.notice, **end.fields)
    return after_end(session_id, end)


def end_write(session_id: str, has_parent: bool, ending: Ending) -> EndWrite:
    """What the store writes for a session's end: its entry, its row's new columns and its
    parent's notice."""
    svc = services()
    fields: dict[str, Any] = {"status": ending.status, "final_text": ending.final_text}
    if ending.error:
        fields["error"] = ending.error
    entry = {"status": ending.status, "error": ending.error, "reason": ending.reason}
    notice = None
    if has_parent:
        # Its identity (as cached while it ran: no read) in the generation that ends.
        child = replace(svc.session_identity(session_id), generation=ending.generation)
        notice = parent_notice(child, ending.status, ending.final_text)
    return EndWrite(f"end:g{ending.generation}", entry, notice, fields)


def after_end(session_id: str, end: EndWrite) -> str | None:
    """What follows a stored end in this process; returns the parent to ring."""
    record = services().forget(session_id)
    if record is not None and record.parent_id is None:
        # Its sandboxed commands ran in a kept executor, idle now until IDLE_S; its
        # children share its run dir, so only a root's end stops it.
        executors.stop_run_dir(record.run_dir)
    return end.notice.session_id if end.notice is not None else None


async def ring_parent(parent: str | None) -> None:
    """Ring the parent told of an end (stored with it): it wakes to find the notice."""
    if parent is not None:
        crash_point("message.posted")  # the notice is stored, the doorbell not rung yet
        await ring(parent)


def set_status(session_id: str, status: str) -> None:
    """Record a status change (waiting, idle, input_required...)."""
    services().catalog.set_status(session_id, status)


DESCRIBE_MAX = 500


def describe_error(exc: BaseException) -> str:
    """One line for an unexpected failure inside a step. For a database error, the
    driver's own first line: not the statement, nor its parameters (the very text that
    may have failed to be stored)."""
    if isinstance(exc, SwarmdeckError):
        return exc.one_line()
    cause = getattr(exc, "orig", None)
    lines = str(cause if cause is not None else exc).strip().splitlines()
    first = " ".join(lines[0].split()) if lines else ""
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text if len(text) <= DESCRIBE_MAX else text[: DESCRIBE_MAX - 1] + "…"
