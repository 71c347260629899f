"""A scripted model for long sessions against a small window, in either wire format: it sets
a cron, reads a 2 KB file at every tick, and answers summary requests. It decides from
what the request's last message is, not from its number of turns (compaction changes
that). Holds no tests itself; bench/long_session.py uses it too."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from swarmdeck.runtime.context import SUMMARY_SYSTEM
from swarmdeck.testing.prompt_cache import prompt_tokens
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall

TASK = "Keep watch: each time your timer fires, read data.txt and report one line about it."
OUTPUT_BYTES = 2048


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping))
    return ""


def is_summary_request(req: FakeRequest) -> bool:
    """A compaction asking for a summary (the runtime's summarizer prompt)."""
    system = req.body.get("system") if req.api == "anthropic" else None
    if system is None:
        first = req.messages[0] if req.messages else {}
        system = first.get("content") if first.get("role") == "system" else ""
    return _text(system).startswith(SUMMARY_SYSTEM)


def last_input(req: FakeRequest) -> str:
    """What the request's last message is: "tool" (a result), "tick", or "other"."""
    last = req.messages[-1]
    content = last.get("content")
    if last.get("role") == "tool":
        return "tool"
    if isinstance(content, list) and any(
        isinstance(b, Mapping) and b.get("type") == "tool_result" for b in content
    ):
        return "tool"
    return "tick" if "cron tick" in _text(content) else "other"


@dataclass
class CronReader:
    """The model: cron at the first turn, read_file at each tick, a line after each result,
    cancel_cron after `iterations` ticks. Records what it was asked."""

    iterations: int
    ticks: int = 0
    summaries: int = 0
    task_seen_at_end: bool = False
    prompts: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, req: FakeRequest) -> Reply:
        with self._lock:
            return self._answer(req)

    def _answer(self, req: FakeRequest) -> Reply:
        if is_summary_request(req):
            self.summaries += 1
            return Reply(text=f"Summary {self.summaries}: every tick read data.txt, all fine.")
        self.prompts.append(prompt_tokens(req.api, req.body))
        kind = last_input(req)
        if kind == "tool":
            return Reply(text=f"tick {self.ticks}: data.txt has {OUTPUT_BYTES} bytes")
        if kind == "tick":
            self.ticks += 1
            if self.ticks >= self.iterations:
                self.task_seen_at_end = TASK in req.task
                return Reply(tool_calls=(ReplyToolCall("cancel_cron", {}),))
            return Reply(tool_calls=(ReplyToolCall("read_file", {"path": "data.txt"}),))
        if self.ticks >= self.iterations:
            return Reply(text="watch ended")
        return Reply(tool_calls=(ReplyToolCall("cron", {"seconds": 0.001, "reason": "tick"}),))


def data_file_text() -> str:
    """2 KB of varied lines (so no two ticks' outputs differ only in a prefix)."""
    lines = [f"line {i:03d}: reading {i * 7 % 97} of the sensor, status nominal" for i in range(40)]
    return ("\n".join(lines) + "\n")[:OUTPUT_BYTES]


def window_of(body: Mapping[str, Any], api: str) -> int:
    """Tokens a request asks the window for: its prompt and its output's room."""
    asked = body.get("max_tokens", body.get("max_completion_tokens")) or 0
    return prompt_tokens(api, body) + int(asked)  # type: ignore[arg-type]
