"""Provider-neutral conversation types: what the runtime hands an adapter and gets back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]
# Usage's token counts, in the order the contract prints them.
TOKEN_COUNTS = ("input", "output", "reasoning", "cache_read", "cache_write")


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for; `arguments` is the raw JSON text the model produced."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    """One entry of the conversation, in the runtime's own neutral form."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    # Hidden reasoning some vendors (DeepSeek, Kimi) require to be sent back verbatim.
    reasoning: str | None = None
    is_error: bool = False
    # An assistant turn's content blocks as the vendor sent them, when it holds blocks of
    # the vendor's own (Anthropic's tool search): sent back verbatim, so the history, and
    # the prefix a cache keeps of it, stays byte for byte what the vendor answered.
    blocks: tuple[Mapping[str, Any], ...] = ()
    # How much of a first message's text its family's sessions share (a mode's
    # instructions, before each one's own task: runtime/family.py). A vendor that caches
    # only where a request marks it (Anthropic) gets a breakpoint there, so a sibling is
    # served that part too; the others cache any prefix of the text on their own.
    shared_upto: int = 0


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: name, description, JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]
    # Sent for the vendor's own tool search to find (Anthropic's `defer_loading`), not
    # shown to the model until a search returns it; never sent where the vendor has none.
    deferred: bool = False
    # The group a deferred tool is indexed under (its MCP server): OpenAI's Responses API
    # gets a group's deferred tools in one namespace, of which the model sees only the
    # name and description until a search loads them.
    group: str | None = None


@dataclass
class Usage:
    """Token counts for one provider call; `estimated` when the provider reported none and
    they were estimated (models/estimate.py)."""

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    estimated: bool = False

    @property
    def reported(self) -> bool:
        """True when the counts say anything (a real call reads at least one token)."""
        return bool(self.input or self.output or self.cache_read or self.cache_write)

    def add(self, other: Usage) -> None:
        """Accumulate another call's counts into this one."""
        for name in TOKEN_COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.estimated = self.estimated or other.estimated

    def as_dict(self) -> dict[str, int]:
        """The counts as the plain dict the contract prints."""
        return {name: getattr(self, name) for name in TOKEN_COUNTS}


@dataclass
class Completion:
    """One model turn: its text, the tool calls it asked for, and what it cost."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    usage: Usage = field(default_factory=Usage)
    stop_reason: str = "stop"
    model: str = ""
    cost_usd: float | None = None
    # The answer's content blocks, kept when the vendor ran a tool of its own in the turn
    # (see Message.blocks); empty otherwise.
    blocks: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Notice:
    """A wait the model layer takes on its own (a retry's backoff, a shared cooldown), for
    the caller to show: what happened, why, and for how long."""

    what: str  # "retry" (private backoff), "cooldown" (set for everyone), "held" (by another's)
    reason: str
    wait_s: float
    attempt: int = 0
    max_attempts: int = 0

    def one_line(self) -> str:
        """The notice as a line for humans."""
        tries = f" (attempt {self.attempt + 1} of {self.max_attempts})" if self.attempt else ""
        label = {
            "retry": "retrying in",
            "cooldown": "cooling down for",
            "held": "held back by the provider's cooldown for",
        }.get(self.what, "waiting")
        return f"{label} {self.wait_s:.1f}s{tries}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        """The notice as the plain dict a transcript entry stores."""
        return {
            "what": self.what,
            "reason": self.reason,
            "wait_s": round(self.wait_s, 3),
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "text": self.one_line(),
        }


# Streamed text goes to a callback so the runtime can emit progress events.
DeltaCallback = Callable[[str], Awaitable[None] | None]
# Called for every streamed chunk of any kind (text, reasoning, tool arguments): the
# answer is still coming.
ChunkCallback = Callable[[], Awaitable[None] | None]
# Called when the model layer is about to wait (retry, cooldown).
NoticeCallback = Callable[[Notice], Awaitable[None] | None]


class ChatModel(Protocol):
    """What the runtime needs from a provider adapter."""

    async def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        on_delta: DeltaCallback | None = None,
        on_chunk: ChunkCallback | None = None,
        on_notice: NoticeCallback | None = None,
    ) -> Completion:
        """Send the conversation, return the model's turn. Raises ProviderError."""
        ...
