"""How a step reaches the catalog from the event loop every session of the process shares:
writes and reads inline when they cannot wait, in a thread when they may."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from swarmdeck.catalog.catalog import WriteWouldWait
from swarmdeck.catalog.records import EventRecord
from swarmdeck.runtime.services import services


async def catalog_write(fn: Callable[..., Any], *args: Any) -> Any:
    """A one-transaction catalog write: on SQLite, on the loop when the write lock is free
    at once (the common case, and a thread hand-off cost more than the write); in a
    thread, where waiting for the lock harms no other session, when it is not."""
    if services().catalog.is_sqlite:
        try:
            return fn(*args, wait=False)
        except WriteWouldWait:
            pass
    return await asyncio.to_thread(fn, *args)


async def catalog_read(fn: Callable[..., Any], *args: Any) -> Any:
    """Catalog reads: inline on SQLite, in a thread elsewhere.

    A WAL reader never waits for a lock, and a thread hand-off cost more than the read
    itself (measured: 0.6 ms a turn). On PostgreSQL a read is a network round trip, which
    must not hold up the loop every other session of this process shares.
    """
    if services().catalog.is_sqlite:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


def stored_event(session_id: str, key: str) -> EventRecord:
    """An event the catalog reported as already stored."""
    event = services().catalog.event_by_key(session_id, key)
    assert event is not None, f"{key} reported stored but not found"
    return event
