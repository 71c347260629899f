"""Fencing: the execution of a session's workflow that the running code belongs to.

Every execution of a session's workflow raises the session's epoch as it starts (a first
run, a recovery, a takeover by another worker: Catalog.open_run) and enters it here. From
then on, the catalog's journaled writes to that session made from this execution (its
transcript entries, its end, `once` marks, its row) land only while the epoch is still the
session's. A worker that was only paused and comes back after another took its sessions
over finds its epoch superseded: its writes raise Fenced, and its sessions stop there.

The epoch travels in a context variable, so it follows the execution into every step and
worker thread (asyncio copies the context) and no step has to pass it along. It covers
writes to its own session only: a parent that cancels a child writes unfenced.
"""

from __future__ import annotations

from contextvars import ContextVar

_current: ContextVar[tuple[str, int] | None] = ContextVar("swarmdeck_fence", default=None)


class Fenced(Exception):
    """Another execution took this session over: this one must stop without writing."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id} was taken over by another execution")
        self.session_id = session_id


def enter(session_id: str, epoch: int) -> None:
    """From here on (in this context) the session's writes run under this epoch."""
    _current.set((session_id, epoch))


def epoch_for(session_id: str) -> int | None:
    """The epoch this context writes to the session under, or None (unfenced)."""
    current = _current.get()
    return current[1] if current is not None and current[0] == session_id else None
