"""The context budget of a turn: measure the prompt against the model's window, and compact
the older turns into a summary when it grows past a share of it.

A compaction is journaled like a turn: its `compact:N` entry (`compact:N:overflow` for the
one a context-length error asks for) holds the summary and the last message it replaces,
so a rerun after a crash finds it and asks no second summary. The catalog keeps every
message; the journal's view puts the summary in place of the compacted ones (journal.py).

What the cut never does: separate a tool call from its result (it falls before a message
that is not a tool result), or leave out the task, the system prompt, loaded skills or
pinned messages. When the model cannot make a summary, the older turns are dropped all
the same, behind a marker that says so.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.errors import ProviderError
from swarmdeck.models.estimate import count_tokens, encoding_for, tools_text
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.types import Message, ToolSpec
from swarmdeck.runtime.crashpoints import crash_point
from swarmdeck.runtime.family import with_preamble
from swarmdeck.runtime.journal import COMPACTION, Journal
from swarmdeck.runtime.prompts import skill_index
from swarmdeck.runtime.services import services
from swarmdeck.runtime.steering import (
    ASKED,
    OVERFLOW,
    THRESHOLD,
    compaction_key,
    nothing_to_compact,
    why_compact,
)
from swarmdeck.runtime.traced import turn_span

# What the recent turns may take of the room left for the conversation after a
# compaction (less after a context-length error), and what the summary may take.
KEEP_SHARE = 0.4
KEEP_SHARE_OVERFLOW = 0.2
SUMMARY_SHARE = 0.15
SUMMARY_MIN_WORDS = 60
# A tool result or message is cut to this in the text the summarizer reads.
SUMMARY_ITEM_CHARS = 2000
# Calibration against the provider's own count stays within these bounds.
RATIO_BOUNDS = (0.25, 4.0)
CHARS_PER_WORD = 6
# The session option holding an agent's `compact_at` (its front matter): where compaction
# starts, as a share of the window, instead of the provider's.
COMPACT_AT_OPTION = "compact_at"

SUMMARY_SYSTEM = (
    "You compress conversations. You are given the older part of an agent's conversation "
    "with its tools. Write a summary the agent can continue from without it."
)
SUMMARY_ASK = (
    "Summarize the conversation above for the agent that will continue it. Keep the goal "
    "and constraints of its task, decisions made, facts learned (file paths, names, numbers, "
    "results of tool calls), what was done and what remains. Write at most {words} words, "
    "no preamble."
)


@dataclass(frozen=True)
class Budget:
    """A model's window less the room its answer needs, and where compaction starts."""

    window: int
    threshold: int
    share: float
    # The smallest prompt the provider refused as over its window, when one was (its
    # window is smaller than its settings say).
    refused_at: int | None = None

    @classmethod
    def of(cls, config: ProviderConfig, share: float | None = None) -> Budget:
        """The budget a provider's settings give; `share` (an agent's `compact_at`) moves
        where compaction starts."""
        # An output cap as large as the window (a user file that set only context_tokens)
        # must not leave no room at all: half the window at most is kept for the answer.
        window = config.context_tokens - min(config.output_tokens, config.context_tokens // 2)
        share = config.compact_at if share is None else share
        return cls(window, int(window * share), share)

    def within(self, refused: int | None) -> Budget:
        """This budget, no larger than what the provider refused showed its window to be."""
        if refused is None:
            return self
        return Budget(
            self.window, min(self.threshold, int(refused * self.share)), self.share, refused
        )


def refused_at(journal: Journal, now: int | None) -> int | None:
    """The smallest prompt refused as over the window so far (journaled with each
    compaction), or now."""
    known = journal.compaction.payload.get("refused_at") if journal.compaction else None
    sizes = [size for size in (known, now) if size]
    return min(sizes) if sizes else None


@dataclass(frozen=True)
class Meter:
    """Token counts for one model: tiktoken's when its encoding is known, else the
    estimate; both scaled by what the provider reported for the previous turn."""

    encoding: Any | None
    ratio: float = 1.0
    # The provider's kind: what the model sees of a deferred tool depends on its vendor.
    kind: str = ""

    def raw(self, message: Message) -> int:
        """A message's tokens before calibration."""
        calls = "".join(c.name + c.arguments for c in message.tool_calls)
        return count_tokens(message.content + (message.reasoning or "") + calls, self.encoding)

    def raw_tools(self, specs: list[ToolSpec]) -> int:
        """The tool schemas' tokens before calibration."""
        return count_tokens(tools_text(specs, self.kind), self.encoding)

    def raw_prompt(self, messages: list[Message], specs: list[ToolSpec]) -> int:
        """A request's tokens before calibration."""
        return sum(self.raw(m) for m in messages) + self.raw_tools(specs)

    def scaled(self, raw: int) -> int:
        """A raw count, calibrated."""
        return int(raw * self.ratio + 0.5)


def meter_for(config: ProviderConfig, model_name: str, journal: Journal) -> Meter:
    """The meter for this turn: calibrated on the last turn's reported input, when the
    provider reported one (an estimate stands in for itself)."""
    encoding = encoding_for(config.kind, model_name)
    last = journal.last_turn
    if last is None:
        return Meter(encoding, kind=config.kind)
    usage = last.payload.get("usage") or {}
    raw = (last.payload.get("context") or {}).get("raw_tokens")
    if usage.get("estimated") or not raw:
        return Meter(encoding, kind=config.kind)
    reported = usage.get("input", 0) + usage.get("cache_read", 0) + usage.get("cache_write", 0)
    low, high = RATIO_BOUNDS
    ratio = min(high, max(low, reported / raw)) if reported else 1.0
    return Meter(encoding, ratio, config.kind)


async def fit_context(
    session_id: str, turn: int, prep: dict[str, Any], *, overflow: bool = False
) -> dict[str, Any] | None:
    """The messages to send for turn `turn`, compacting first when they are over the
    budget's threshold (unless the storm guard holds), when a person asked for it, or
    (`overflow`) when the provider said they are over its window;
    with what was measured. None when `overflow` asked for a compaction that cannot be
    made (done already for this turn, or nothing left to compact)."""
    svc = services()
    record = prep["record"]
    config, model_name = svc.provider_for(record.model)
    journal = svc.journal(session_id)
    meter = meter_for(config, model_name, journal)
    system, specs = prep["system"], prep["specs"]
    preamble = prep.get("preamble")
    raw = meter.raw_prompt([system, *with_preamble(journal.view(), preamble)], specs)
    share = record.options.get(COMPACT_AT_OPTION)
    budget = Budget.of(config, share).within(
        refused_at(journal, meter.scaled(raw) if overflow else None)
    )
    over = meter.scaled(raw) > budget.threshold
    why = await why_compact(
        session_id, journal, turn, overflow=overflow, over=over, window=budget.window
    )
    key = compaction_key(turn, why or THRESHOLD)
    if why is not None and journal.get(key) is None:
        payload = compaction_plan(journal, meter, budget, system, specs, overflow)
        if payload is not None:
            payload |= {"refused_at": budget.refused_at, "turn": turn, "why": why}
            payload["answers"] = journal.asked if why == ASKED else None
            await _compact(record, turn, journal, key, payload, meter)
            raw = meter.raw_prompt([system, *with_preamble(journal.view(), preamble)], specs)
        elif overflow:
            return None
        elif why == ASKED:
            await nothing_to_compact(session_id, journal, turn)
    elif overflow:
        return None
    return {
        "messages": [system, *with_preamble(journal.view(), preamble)],
        "context": {
            "raw_tokens": raw,
            "prompt_tokens": meter.scaled(raw),
            "window": budget.window,
            "tokenizer": "tiktoken" if meter.encoding is not None else "estimate",
            "runtime": runtime_tokens(
                meter, system, specs, prep.get("skills_index", ""), prep.get("project", "")
            ),
        },
        "spent": compactions_spent(journal, turn),
    }


def runtime_tokens(
    meter: Meter, system: Message, specs: list[ToolSpec], skills: str, project: str = ""
) -> dict[str, int]:
    """What the runtime itself adds to every turn: its system prompt (of which the skill
    index), and the tool schemas; and apart, the project's instructions the system prompt
    carries, which are the project's words, not the runtime's."""
    own = meter.scaled(count_tokens(project, meter.encoding)) if project else 0
    return {
        "system": meter.scaled(meter.raw(system)) - own,
        "skills": meter.scaled(count_tokens(skills, meter.encoding)),
        "tools": meter.scaled(meter.raw_tools(specs)),
        "project": own,
    }


def session_runtime_tokens(
    system_text: str, specs: list[ToolSpec], skills: list[Any], encoding: Any | None = None
) -> dict[str, int]:
    """The runtime's own tokens for a system prompt and tools, uncalibrated (for a mode
    measured outside a session)."""
    meter = Meter(encoding)
    return runtime_tokens(meter, Message("system", system_text), specs, skill_index(skills))


def compaction_plan(
    journal: Journal,
    meter: Meter,
    budget: Budget,
    system: Message,
    specs: list[ToolSpec],
    overflow: bool,
) -> dict[str, Any] | None:
    """Which messages to compact and how long the summary may be; None when nothing can
    be (no message before the last exchange, past the latest compaction)."""
    start = journal.cut()
    messages = journal.messages
    head = [m for m, (_, kind, _) in zip(messages, journal.sources, strict=False) if kind == "task"]
    fixed = meter.scaled(meter.raw_prompt([system, *head], specs))
    room = max(0, budget.threshold - fixed)
    keep = int(room * (KEEP_SHARE_OVERFLOW if overflow else KEEP_SHARE))
    cut = choose_cut(messages, start, [meter.scaled(meter.raw(m)) for m in messages[start:]], keep)
    if cut is None:
        return None
    words = max(SUMMARY_MIN_WORDS, int(room * SUMMARY_SHARE * 4 / CHARS_PER_WORD))
    return {"start": start, "cut": cut, "words": words, "overflow": overflow}


def choose_cut(messages: list[Message], start: int, counts: list[int], keep: int) -> int | None:
    """Where the kept messages begin: the earliest message past `start` that is not a tool
    result (so no call loses its result) from which the rest fits in `keep` tokens; at the
    latest, the last such message (the last exchange is always kept). None when no message
    past `start` can begin the kept part."""
    candidates = [i for i in range(start + 1, len(messages)) if messages[i].role != "tool"]
    if not candidates:
        return None
    after = sum(counts)
    for i in range(start, len(messages)):
        if i > start and messages[i].role != "tool" and after <= keep:
            return i
        after -= counts[i - start]
    return candidates[-1]


def summary_request(previous: str | None, messages: list[Message], words: int) -> list[Message]:
    """What the summarizer is asked: the older conversation as plain text (no tool calls of
    its own to pair), after the summary that already stood for what came before it."""
    lines = []
    if previous:
        lines.append(f"(Summary of what came before)\n{previous}")
    for message in messages:
        lines.append(_transcript_line(message))
    text = "\n\n".join(lines) + "\n\n" + SUMMARY_ASK.format(words=words)
    return [Message("system", SUMMARY_SYSTEM), Message("user", text)]


def _clip(text: str) -> str:
    if len(text) <= SUMMARY_ITEM_CHARS:
        return text
    half = SUMMARY_ITEM_CHARS // 2
    return f"{text[:half]} […{len(text) - SUMMARY_ITEM_CHARS} characters…] {text[-half:]}"


def _transcript_line(message: Message) -> str:
    """One message as a line of the summarizer's transcript."""
    if message.role == "tool":
        return f"[tool result{' (error)' if message.is_error else ''}] {_clip(message.content)}"
    line = f"[{message.role}] {_clip(message.content)}" if message.content else f"[{message.role}]"
    for call in message.tool_calls:
        line += f"\n  called {call.name}({_clip(call.arguments)})"
    return line


def _marker(count: int, why: str) -> str:
    return (
        f"[{count} earlier messages were dropped to fit the context window, without a "
        f"summary: {why}. The full transcript is kept in the session's store.]"
    )


async def _compact(
    record: SessionRecord,
    turn: int,
    journal: Journal,
    key: str,
    plan: dict[str, Any],
    meter: Meter,
) -> None:
    """Ask the model for a summary of the planned messages and journal the compaction; a
    summary that fails leaves a marker instead."""
    svc = services()
    session_id = record.id
    start, cut = plan["start"], plan["cut"]
    previous = journal.compaction.payload["text"] if journal.compaction is not None else None
    request = summary_request(previous, journal.messages[start:cut], plan["words"])
    payload: dict[str, Any] = {
        "through": journal.sources[cut - 1][0],
        "messages": cut - start,
        "overflow": plan["overflow"],
        "summarized": False,
        "refused_at": plan.get("refused_at"),
        "turn": turn,
        "why": plan.get("why"),
        "answers": plan.get("answers"),
    }
    crash_point("compact.before")
    # A chat span of its own: the summary's tokens are part of what the session spent.
    with turn_span(record, turn, purpose="compaction") as span:
        try:
            completion = await svc.model(record.model).complete(request, [])
        except ProviderError as exc:
            span.failed(exc.kind, exc.one_line())
            payload["error"] = exc.one_line()
            completion = None
        else:
            span.completed(completion, request)
    summary = " ".join((completion.text if completion else "").split())
    limit = plan["words"] * CHARS_PER_WORD
    if summary:
        clipped = summary if len(summary) <= limit else summary[: limit - 1] + "…"
        payload["text"] = (
            f"[Summary of the {cut - start + (0 if previous is None else 1)} earlier messages, "
            "compacted to fit the context window; the full transcript is kept in the "
            f"session's store]\n{clipped}"
        )
        payload["summarized"] = True
    else:
        why = payload.get("error") or "the model answered with no text"
        payload["error"] = why
        payload["text"] = (previous + "\n\n" if previous else "") + _marker(cut - start, why)
    payload["freed"] = freed_tokens(journal, meter, start, cut, payload["text"])
    if completion is not None:
        payload["usage"] = {**completion.usage.as_dict(), "estimated": completion.usage.estimated}
        payload["cost_usd"] = completion.cost_usd
    await asyncio.to_thread(svc.catalog.append_event, session_id, key, COMPACTION, payload)
    journal.refresh(svc.catalog)
    crash_point("compact.after")


def freed_tokens(journal: Journal, meter: Meter, start: int, cut: int, text: str) -> int:
    """What a compaction frees of the prompt: the messages it replaces (less those kept
    verbatim: the task, pinned ones) and the summary it replaces, less its own summary."""
    replaced = sum(
        meter.raw(journal.messages[i])
        for i in range(start, cut)
        if journal.sources[i][1] != "task" and not journal.sources[i][2]
    )
    if journal.compaction is not None:
        replaced += meter.raw(Message("user", journal.summary_text()))
    return meter.scaled(replaced) - meter.scaled(meter.raw(Message("user", text)))


def compactions_spent(journal: Journal, turn: int) -> dict[str, Any]:
    """Tokens and cost of the summaries made before turn `turn` (the turn's usage row
    counts them: making room for the turn is part of it)."""
    spent: dict[str, Any] = {"usage": {}, "cost_usd": None, "estimated": False}
    for why in (ASKED, THRESHOLD, OVERFLOW):
        event = journal.get(compaction_key(turn, why))
        if event is None or "usage" not in event.payload:
            continue
        usage = event.payload["usage"]
        for name, value in usage.items():
            if name != "estimated":
                spent["usage"][name] = spent["usage"].get(name, 0) + value
        spent["estimated"] = spent["estimated"] or bool(usage.get("estimated"))
        if event.payload.get("cost_usd") is not None:
            spent["cost_usd"] = (spent["cost_usd"] or 0.0) + event.payload["cost_usd"]
    return spent
