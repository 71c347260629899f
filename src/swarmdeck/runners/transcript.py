"""A runner's parsed events written into swarmdeck's transcript as the built-in loop
writes its own: an `assistant` entry per model response (with its usage in the ledger, in
the same transaction), a `tool_result` per tool call, and the runner's session id; and
their spans, as the built-in loop's turns and tool calls have (the runner reports each
response when it is done, so a span marks it then, with its usage)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from swarmdeck.models.types import Completion, ToolCall, Usage
from swarmdeck.runners.base import Item, RunnerSession, Step, ToolDone
from swarmdeck.runtime.services import services
from swarmdeck.runtime.traced import tool_span, turn_span

# The transcript kind that records the runner's own session id (what its resume takes).
RUNNER_SESSION_KIND = "runner_session"
# What started a runner's turns, in the turn's `origin`.
RUNNER_ORIGIN = "runner"


@dataclass
class TranscriptWriter:
    """Numbers the runner's responses on from the session's last turn and stores them."""

    session_id: str
    provider: str
    model: str
    turn: int
    runner_session: str | None = None
    final_text: str = ""

    async def write(self, item: Item) -> None:
        """Store one parsed item (idempotent per key, like the built-in loop's entries)."""
        await asyncio.to_thread(self._write, item)
        self._trace(item)

    def _trace(self, item: Item) -> None:
        if not services().tracing.enabled:
            return
        if isinstance(item, Step):
            record = services().session_identity(self.session_id)
            usage = Usage(**{name: int(item.usage.get(name, 0)) for name in _COUNTS})
            calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in item.tool_calls]
            done = Completion(
                item.text, calls, usage=usage, model=self.model, cost_usd=item.cost_usd
            )
            with turn_span(record, self.turn - 1) as span:
                span.completed(done, [])
        elif isinstance(item, ToolDone):
            call = {"id": item.call_id, "name": item.name, "arguments": ""}
            with tool_span(self.session_id, call, "runner") as span:
                span.finished(item.content, item.is_error)

    def _write(self, item: Item) -> None:
        catalog = services().catalog
        if isinstance(item, RunnerSession):
            self.runner_session = item.value
            key = f"runner_session:{item.value}"
            catalog.append_event(self.session_id, key, RUNNER_SESSION_KIND, {"id": item.value})
        elif isinstance(item, Step):
            self._step(item)
        elif isinstance(item, ToolDone):
            payload = {
                "call_id": item.call_id,
                "name": item.name,
                "content": item.content,
                "is_error": item.is_error,
                "permission_denied": False,
            }
            key = f"tool:{self.turn - 1}:{item.call_id}"
            catalog.append_event(self.session_id, key, "tool_result", payload)

    def _step(self, step: Step) -> None:
        counts = {name: int(step.usage.get(name, 0)) for name in _COUNTS}
        usage_row = {
            "turn": self.turn,
            "provider": self.provider,
            "model": self.model,
            "cost_usd": step.cost_usd,
            "estimated": False,
            **counts,
        }
        payload = {
            "text": step.text,
            "tool_calls": step.tool_calls,
            "reasoning": None,
            "usage": {**counts, "estimated": False},
            "origin": RUNNER_ORIGIN,
        }
        services().catalog.append_event(
            self.session_id, f"turn:{self.turn}", "assistant", payload, usage_row
        )
        self.turn += 1
        if step.text.strip():
            self.final_text = step.text


_COUNTS = ("input", "output", "reasoning", "cache_read", "cache_write")
