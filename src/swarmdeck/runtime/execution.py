"""The start of an execution of a session's generation: what the loop needs, and the epoch
it writes under (a rerun after a crash takes the same path as the first run)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from swarmdeck.catalog import fence
from swarmdeck.catalog.records import RESUMED_KIND, SessionRecord
from swarmdeck.runtime.budget import budget_of, with_ancestors
from swarmdeck.runtime.journal import Journal
from swarmdeck.runtime.offered import offered_tools, session_skills
from swarmdeck.runtime.services import services
from swarmdeck.runtime.tree import drain_inbox, model_resting


@dataclass(frozen=True)
class Execution:
    """An execution of a generation's workflow as it starts: what the loop needs, the epoch
    it writes under (see catalog/fence.py), and whether it may retrace engine steps an
    earlier execution recorded. It may not when it stored the generation's start itself,
    in one transaction with its claim: that start comes before any engine step."""

    info: dict[str, Any]
    epoch: int
    may_replay: bool


async def start_generation(session_id: str, generation: int) -> dict[str, Any]:
    """What the loop needs to run this generation of the session (see load_session)."""
    return (await begin_execution(session_id, generation)).info


async def begin_execution(session_id: str, generation: int) -> Execution:
    """Start an execution of the generation's workflow (see Execution)."""
    return await asyncio.to_thread(load_session, session_id, generation)


def load_session(session_id: str, generation: int) -> Execution:
    """The parts of the session record the loop needs, and this execution's epoch; marks
    the session running and takes in the messages that arrived while no worker ran it.

    Journaled like a turn: the first run stores what it found as the generation's start,
    and a rerun after a crash returns that, so the loop takes the same path as before even
    though the session (its cron, its turns) has moved on since. Every run claims the
    session under a new epoch before it writes anything, which fences off the one before.
    """
    svc = services()
    executor = svc.executor_id()
    before, stored = svc.catalog.run_start(session_id, generation)
    if stored is not None:
        _remember_for_rerun(before)
        return Execution(stored, _resume_run(session_id, generation, executor), may_replay=True)
    claimed = None
    if not before.terminal and before.generation == generation:
        # The transcript and whether mail waits, in one read; most starts find none. Then
        # what the loop needs is made from the session as read, and stored with the claim
        # (one commit, not two) if the claim finds the session as read.
        journal, mail = svc.journal_with_mail(session_id, f"g{generation}:start")
        if not mail:
            opened = _open_keeping(before, generation, executor, journal)
            if opened is None:
                # Another execution stored this generation's start first: this one reruns.
                stored = svc.catalog.generation_start(session_id, generation)
                assert stored is not None, f"generation {generation} of {session_id} not stored"
                _remember_for_rerun(before)
                epoch = _resume_run(session_id, generation, executor)
                return Execution(stored, epoch, may_replay=True)
            record, turns, kept = opened
            fence.enter(session_id, record.epoch)
            if kept is not None:
                svc.remember(record)
                return Execution(kept, record.epoch, may_replay=False)
            claimed = record, turns
    # Another execution may have stored the start first (keep_generation_start): a replay
    # is then possible, and the engine tells.
    info, epoch = _start_after_claim(session_id, generation, executor, claimed)
    return Execution(info, epoch, may_replay=True)


def _remember_for_rerun(before: SessionRecord) -> None:
    """A rerun's session as this start read it, for the loop's identity (session_identity):
    without it the loop read the session again, on the event loop. An ended one is not
    kept: no end of its own would drop it."""
    if not before.terminal:
        services().remember(before)


def _open_keeping(
    before: SessionRecord, generation: int, executor: str, journal: Journal
) -> tuple[SessionRecord, int, dict[str, Any] | None] | None:
    """Claim the session, storing the start made from it as read `before` when the claim
    finds it unchanged (see Catalog.open_run_keeping)."""
    turns = sum(1 for e in journal.by_key.values() if e.kind == "assistant")
    # As claimed: `running` (the claim's own status), the rest as read.
    info = _start_info(replace(before, status="running"), generation, turns, journal, [])

    def holds(record: SessionRecord, turns_now: int) -> bool:
        now = (record.generation, record.options, record.terminal, turns_now)
        return now == (generation, before.options, False, turns)

    return services().catalog.open_run_keeping(before.id, executor, generation, info, holds)


def _start_after_claim(
    session_id: str,
    generation: int,
    executor: str,
    claimed: tuple[SessionRecord, int] | None,
) -> tuple[dict[str, Any], int]:
    """The start that claims the session first (unless `claimed` did), then takes what
    waits in its inbox, then stores what the loop needs."""
    svc = services()
    record, turns_done = claimed or svc.catalog.open_run(session_id, executor)
    fence.enter(session_id, record.epoch)
    if record.terminal or record.generation != generation:
        # Ended, or superseded by a newer generation before this one ever ran.
        return {"terminal": True, "status": record.status}, record.epoch
    svc.remember(record)
    claim = f"g{generation}:start"
    journal, mail = svc.journal_with_mail(session_id, claim)
    taken = drain_inbox(session_id, claim, None, record=True) if mail else []
    if taken:
        journal.refresh(svc.catalog)  # what the drain recorded
    info = _start_info(record, generation, turns_done, journal, taken)
    return svc.catalog.keep_generation_start(session_id, generation, info), record.epoch


def _start_info(
    record: SessionRecord,
    generation: int,
    turns_done: int,
    journal: Journal,
    taken: list[dict[str, Any]],
) -> dict[str, Any]:
    """What the loop needs to run this generation (stored as its start)."""
    svc = services()
    chain = with_ancestors(record)
    return {
        # The model ended its last turn and nothing came after it (a rolled-over generation).
        "resting": turns_done > 0 and not taken and model_resting(record.id),
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
