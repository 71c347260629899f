"""The start of an execution of a session's generation: what the loop needs, and the epoch
it writes under (a rerun after a crash takes the same path as the first run)."""

from __future__ import annotations

import asyncio
from typing import Any

from swarmdeck.catalog import fence
from swarmdeck.catalog.records import RESUMED_KIND
from swarmdeck.runtime.budget import budget_of, with_ancestors
from swarmdeck.runtime.offered import offered_tools, session_skills
from swarmdeck.runtime.services import services
from swarmdeck.runtime.tree import drain_inbox, model_resting


async def start_generation(session_id: str, generation: int) -> dict[str, Any]:
    """What the loop needs to run this generation of the session (see load_session)."""
    return (await begin_execution(session_id, generation))[0]


async def begin_execution(session_id: str, generation: int) -> tuple[dict[str, Any], int]:
    """Start an execution of the generation's workflow: what the loop needs, and the epoch
    this execution writes under (see catalog/fence.py)."""
    return await asyncio.to_thread(load_session, session_id, generation)


def load_session(session_id: str, generation: int) -> tuple[dict[str, Any], int]:
    """The parts of the session record the loop needs, and this execution's epoch; marks
    the session running and takes in the messages that arrived while no worker ran it.

    Journaled like a turn: the first run stores what it found as the generation's start,
    and a rerun after a crash returns that, so the loop takes the same path as before even
    though the session (its cron, its turns) has moved on since. Every run claims the
    session under a new epoch before it writes anything, which fences off the one before.
    """
    svc = services()
    executor = svc.executor_id()
    stored = svc.catalog.generation_start(session_id, generation)
    if stored is not None:
        return stored, _resume_run(session_id, generation, executor)
    record, turns_done = svc.catalog.open_run(session_id, executor)
    fence.enter(session_id, record.epoch)
    if record.terminal or record.generation != generation:
        # Ended, or superseded by a newer generation before this one ever ran.
        return {"terminal": True, "status": record.status}, record.epoch
    svc.remember(record)
    taken = drain_inbox(session_id, f"g{generation}:start", None, record=True)
    chain = with_ancestors(record)
    journal = svc.journal(session_id, fresh=True)
    info = {
        # The model ended its last turn and nothing came after it (a rolled-over generation).
        "resting": turns_done > 0 and not taken and model_resting(session_id),
        "parent_id": record.parent_id,
        "mode": record.mode,
        "options": record.options,
        "terminal": False,
        "status": record.status,
        "generation": generation,
        "turns_done": turns_done,
        "offered": [
            t.name
            for t in offered_tools(
                record, session_skills(record, journal.skills_before(turns_done))
            )
        ],
        "budgeted": any(budget_of(s) for s in chain),
        "rollover_iterations": int(
            record.options.get("rollover_iterations", svc.settings.rollover_iterations)
        ),
    }
    return svc.catalog.keep_generation_start(session_id, generation, info), record.epoch


def _resume_run(session_id: str, generation: int, executor: str) -> int:
    """Claim the session for a rerun of its execution (after a crash, a restart or a
    takeover) and say so in its transcript, where whoever follows it sees the session go on
    elsewhere; returns the new epoch."""
    catalog = services().catalog
    epoch, after = catalog.claim_run(session_id, executor)
    fence.enter(session_id, epoch)
    payload = {"executor": executor, "after": after, "epoch": epoch}
    catalog.append_event(session_id, f"g{generation}:resumed:{epoch}", RESUMED_KIND, payload)
    return epoch
