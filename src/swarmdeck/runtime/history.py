"""Rebuild the conversation the model sees from the catalog's transcript."""

from __future__ import annotations

from swarmdeck.catalog.records import BUDGET_NOTE_KIND, EventRecord
from swarmdeck.models.types import Message, ToolCall

# Transcript kinds that become conversation messages; the rest (status, notes) do not.
# A budget's note (runtime/budget.py) is a message to the model, so that it wraps up.
CONVERSATION_KINDS = (
    "task",
    "user",
    "assistant",
    "tool_result",
    "child_update",
    "timer",
    BUDGET_NOTE_KIND,
)


def to_message(ev: EventRecord) -> Message | None:
    """The conversation message a transcript entry makes; None for status, notes, errors."""
    p = ev.payload
    if ev.kind in ("task", "user", "child_update", "timer", BUDGET_NOTE_KIND):
        return Message("user", p["text"])
    if ev.kind == "assistant":
        calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in p["tool_calls"])
        blocks = tuple(p.get("blocks") or ())
        return Message("assistant", p["text"], calls, reasoning=p.get("reasoning"), blocks=blocks)
    if ev.kind == "tool_result":
        return Message(
            "tool", p["content"], tool_call_id=p["call_id"], is_error=p.get("is_error", False)
        )
    return None
