"""Rebuild the conversation the model sees from the catalog's transcript."""

from __future__ import annotations

from swarmdeck.catalog.records import EventRecord
from swarmdeck.models.types import Message, ToolCall

# Transcript kinds that become conversation messages; the rest (status, notes) do not.
CONVERSATION_KINDS = ("task", "user", "assistant", "tool_result", "child_update", "timer")


def build_messages(system_prompt: str, events: list[EventRecord]) -> list[Message]:
    """System prompt, then every conversational event in order."""
    messages = [Message("system", system_prompt)]
    for ev in events:
        p = ev.payload
        if ev.kind in ("task", "user", "child_update", "timer"):
            messages.append(Message("user", p["text"]))
        elif ev.kind == "assistant":
            calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in p["tool_calls"])
            messages.append(Message("assistant", p["text"], calls, reasoning=p.get("reasoning")))
        elif ev.kind == "tool_result":
            messages.append(
                Message(
                    "tool",
                    p["content"],
                    tool_call_id=p["call_id"],
                    is_error=p.get("is_error", False),
                )
            )
    return messages
