"""Transcript entries the loop appends or reads, and the engine history of old generations."""

from __future__ import annotations

import asyncio
from typing import Any

from swarmdeck.runtime.services import services
from swarmdeck.runtime.workflow_ids import workflow_id


def append_event(session_id: str, key: str, kind: str, payload: dict[str, Any]) -> None:
    """Append one transcript entry (idempotent by key)."""
    services().catalog.append_event(session_id, key, kind, payload)


# A system agent's rollover drops the engine history of its earlier generations (this
# many are looked back at, in case a crash skipped a drop).
HISTORY_DROP_WINDOW = 5


async def drop_old_generations(session_id: str, generation: int) -> int:
    """Delete the engine history of a session's generations before this one (they
    ended; the catalog keeps the transcript): a system agent that runs for months keeps a
    bounded step log without a model call. Returns the runs deleted."""
    from swarmdeck.catalog.housekeeping import forget_generations

    svc = services()
    if svc.engine_ops is None:
        return 0
    old = range(max(0, generation - HISTORY_DROP_WINDOW), generation)
    deleted = await svc.engine_ops.delete_workflows([workflow_id(session_id, g) for g in old])
    await asyncio.to_thread(forget_generations, svc.catalog, [(session_id, g) for g in old])
    return len(deleted)


def last_model_text(session_id: str) -> str:
    """The text of the session's last stored model turn ("" when there is none)."""
    event = services().catalog.last_event(session_id, ["assistant"])
    return event.payload["text"] if event is not None else ""
