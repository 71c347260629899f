"""When to compact, as the user steers it: a person's request to compact now (`sessions
compact`), and the guard against a storm.

A compaction that freed less than a tenth of the window did not help: the history is mostly
what cannot be compacted (the task, pinned messages, the last exchange). Compacting again at
every turn past the threshold would only pay for summaries, so the next compaction for the
threshold's sake waits GUARD_TURNS turns, and the session says so in its transcript, once.
A context-length error and a person's request still compact.
"""

from __future__ import annotations

import asyncio
from typing import Any

from swarmdeck.catalog.records import CONTEXT_NOTE_KIND
from swarmdeck.runtime.journal import Journal
from swarmdeck.runtime.services import services

GUARD_FREED_SHARE = 0.1
GUARD_TURNS = 5
# Why a compaction is made, and the journal key of each (see compaction_key).
OVERFLOW, ASKED, THRESHOLD = "overflow", "asked", "threshold"


def compaction_key(turn: int, why: str) -> str:
    """The journal key of the compaction before turn `turn`, made for this reason."""
    return f"compact:{turn}" if why == THRESHOLD else f"compact:{turn}:{why}"


def guard(journal: Journal, turn: int, window: int) -> dict[str, Any] | None:
    """The latest compaction, when it freed less than a tenth of the window and was made
    at most GUARD_TURNS turns before this one (then the threshold does not compact)."""
    last = journal.compaction
    if last is None:
        return None
    freed, at = last.payload.get("freed"), last.payload.get("turn")
    if freed is None or at is None:
        return None  # made before the guard was (its turn and what it freed are unknown)
    if freed >= window * GUARD_FREED_SHARE or turn - at > GUARD_TURNS:
        return None
    return {"key": last.key, "turn": at, "freed": freed, "window": window}


async def why_compact(
    session_id: str, journal: Journal, turn: int, *, overflow: bool, over: bool, window: int
) -> str | None:
    """Why to compact before this turn (OVERFLOW, ASKED or THRESHOLD), or None; a threshold
    the guard holds back says so in the transcript, once per compaction it follows."""
    if overflow:
        return OVERFLOW
    if journal.asked is not None:
        return ASKED
    if not over:
        return None
    held = guard(journal, turn, window)
    if held is None:
        return THRESHOLD
    key = f"compact-guard:{held['key']}"
    if journal.get(key) is not None:
        return None  # said so already
    until = held["turn"] + GUARD_TURNS + 1
    text = (
        f"not compacting: the compaction before turn {held['turn']} freed only "
        f"{held['freed']:,} tokens, less than a tenth of the {window:,}-token window (what "
        f"is left cannot be shrunk much); the next waits until turn {until}"
    )
    payload = {"what": "guard", "text": text, "after": held["key"], "until": until}
    await note(session_id, key, payload)
    return None


async def note(session_id: str, key: str, payload: dict[str, Any]) -> None:
    """A line about the session's context in its transcript (not a message to the model);
    the journal takes it in at the next turn's refresh."""
    catalog = services().catalog
    await asyncio.to_thread(catalog.append_event, session_id, key, CONTEXT_NOTE_KIND, payload)


async def nothing_to_compact(session_id: str, journal: Journal, turn: int) -> None:
    """Answer a person's request when there is nothing to compact (it is consumed)."""
    text = "nothing to compact: the history past the last compaction is the last exchange"
    payload = {"what": "asked", "text": text, "answers": journal.asked}
    await note(session_id, f"{compaction_key(turn, ASKED)}:none", payload)
