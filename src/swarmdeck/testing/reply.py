"""What the fake model answers: a reply, its tool calls, token counts and injected faults,
and the values the server derives from them."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from swarmdeck.testing.prompt_cache import CacheUse, prompt_tokens
from swarmdeck.testing.request import FakeRequest


@dataclass(frozen=True)
class ReplyUsage:
    """Token counts of a reply; None means "derive" (input/output) or "omit" (the rest)."""

    input: int | None = None
    output: int | None = None
    reasoning: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None


# Field for field script.FaultSpec on purpose: that is the script file's edge, validated by
# pydantic; this the plain value the server works with (see script._fault_from_spec).
@dataclass(frozen=True)
class Fault:
    """A failure to inject; `times=None` means every time."""

    status: int | None = None
    retry_after: float | None = None
    times: int | None = None
    body: dict[str, Any] | None = None
    cut_stream: bool = False
    malformed_arguments: bool = False
    ignore_stream: bool = False
    empty_stream: bool = False
    omit_usage: bool = False
    hang_up: bool = False


@dataclass(frozen=True)
class ReplyToolCall:
    """A tool call to answer with; a str `arguments` is sent verbatim."""

    name: str
    arguments: str | Mapping[str, Any] = field(default_factory=dict)

    def arguments_text(self) -> str:
        """The arguments as the JSON text a model would emit."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass(frozen=True)
class Reply:
    """What the fake model answers to one request."""

    text: str = ""
    tool_calls: tuple[ReplyToolCall, ...] = ()
    reasoning: str | None = None
    usage: ReplyUsage | None = None
    # The query of a search with the request's tool search tool (Anthropic's), run by the
    # fake over the deferred tools before the reply's text and calls (testing/tool_search).
    tool_search: str | None = None
    # Anthropic's server paused the turn (`pause_turn`: its own tool loop ran long): the
    # client sends the turn back as it stands to have it go on.
    pause_turn: bool = False
    delay: float = 0.0
    chunk_delay: float = 0.0
    fault: Fault | None = None


def _estimate_tokens(chars: int) -> int:
    """The deterministic stand-in for a tokenizer: a token per 4 characters, at least 1."""
    return max(1, chars // 4)


def effective_usage(
    reply: Reply, request: FakeRequest, cache: CacheUse | None = None
) -> ReplyUsage:
    """Scripted counts, with unset ones derived: output (and reasoning, if any) from the
    answer's length, input from the prompt's weight and what the cache served of it (in
    the vendor's terms: OpenAI's prompt count holds the cached tokens, Anthropic's input
    count does not)."""
    given = reply.usage or ReplyUsage()
    reasoning = given.reasoning
    if reasoning is None and reply.usage is None and reply.reasoning:
        reasoning = _estimate_tokens(len(reply.reasoning))
    output = given.output
    if output is None:
        chars = len(reply.text) + sum(
            len(c.name) + len(c.arguments_text()) for c in reply.tool_calls
        )
        # Like OpenAI's completion_tokens, the output count includes reasoning.
        output = _estimate_tokens(chars) + (reasoning or 0)
    if cache is None:
        cache = CacheUse(max(1, prompt_tokens(request.api, request.body)))
    if given.input is not None:
        return ReplyUsage(given.input, output, reasoning, given.cache_read, given.cache_write)
    cache_read = given.cache_read if given.cache_read is not None else (cache.read or None)
    cache_write = given.cache_write if given.cache_write is not None else (cache.written or None)
    if request.api == "openai":
        return ReplyUsage(cache.total, output, reasoning, cache_read, cache_write)
    uncached = cache.total - (cache_read or 0) - (cache_write or 0)
    return ReplyUsage(max(0, uncached), output, reasoning, cache_read, cache_write)


def break_json(text: str) -> str:
    """Arguments text that no JSON parser accepts (a model cut off mid-object)."""
    if not text:
        return "{"
    broken = text[:-1] if len(text) > 1 else text
    try:
        json.loads(broken)
    except ValueError:
        return broken
    return broken + "{"


class FaultCounter:
    """Counts how often a `times`-limited fault fired, per conversation and turn."""

    def __init__(self) -> None:
        self._hits: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()

    def fires(self, fault: Fault, request: FakeRequest) -> bool:
        """Whether the fault applies to this request; counts it if it does."""
        if fault.times is None:
            return True
        # The messages hash pins scenario and turn, so a client retry of the same
        # request hits the same counter while other conversations are unaffected.
        key = (request.turn, request.conversation_key)
        with self._lock:
            hits = self._hits.get(key, 0)
            if hits >= fault.times:
                return False
            self._hits[key] = hits + 1
            return True

    def reset(self) -> None:
        """Forget all counts."""
        with self._lock:
            self._hits.clear()
