"""One LLM turn as a durable step: a stored turn is returned, never asked for twice."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any

from swarmdeck.catalog.records import EventRecord, SessionRecord, TurnWrite
from swarmdeck.errors import ProviderError
from swarmdeck.models.errors import CONTEXT_OVERFLOW
from swarmdeck.models.types import Message
from swarmdeck.runtime.catalog_io import catalog_read, catalog_write, stored_event
from swarmdeck.runtime.context import fit_context
from swarmdeck.runtime.crashpoints import crash_point
from swarmdeck.runtime.family import Family
from swarmdeck.runtime.offered import (
    family_tools,
    offered_tools,
    session_skills,
    skill_tool_names,
    tool_offer,
    toolset_tools,
    visible_skills,
)
from swarmdeck.runtime.prefix_warmup import first_on_prefix, prefix_key
from swarmdeck.runtime.project_docs import PROJECT_DOCS_OPTION
from swarmdeck.runtime.prompts import skill_index, system_prompt
from swarmdeck.runtime.services import services
from swarmdeck.runtime.status import Ending, after_end, end_write
from swarmdeck.runtime.traced import turn_span
from swarmdeck.runtime.tree import drain_inbox
from swarmdeck.runtime.turn_watch import TurnWatch
from swarmdeck.tools.base import Tool

# The status a session moves to as a turn is stored, from the turn's tool calls (None: no
# change): it rides in the turn's own transaction.
StatusAfter = Callable[[list[dict[str, Any]]], str | None]


def _look_up_turn(session_id: str, turn: int, generation: int, inbox: list[str]) -> dict[str, Any]:
    """The stored turn if there is one; whether the session was ended from outside
    (cancelled); whether messages wait to join the conversation (reads only)."""
    svc = services()
    journal = svc.journal(session_id)
    mail = journal.refresh_with_mail(svc.catalog, inbox, f"turn:{turn}")
    stored = journal.get(f"turn:{turn}") or journal.get(error_key(turn, generation))
    if stored is not None:
        return {"stored": _turn_reply(stored)}
    ended = journal.get(f"end:g{generation}")
    if ended is not None:
        return {"ended": ended.payload}
    return {"mail": mail}


def error_key(turn: int, generation: int) -> str:
    """The key of the provider error that ended turn `turn` in one generation.

    Per generation: the error is the turn's answer for a rerun of the same generation
    after a crash (it ended the session), but a resume is a new generation, which asks the
    model again. The error stays in the transcript either way.
    """
    return f"turn:{turn}:error:g{generation}"


def _take_mail(session_id: str, turn: int, inbox: list[str]) -> None:
    """Messages that arrived since the last turn join the conversation (a write)."""
    if drain_inbox(session_id, f"turn:{turn}", inbox, record=True):
        svc = services()
        svc.journal(session_id, fresh=True)


def _prompt(session_id: str, turn: int, extra: list[Tool]) -> dict[str, Any]:
    """What the model call needs: the session's prompt, conversation and tools, and what
    started the turn."""
    svc = services()
    record = svc.session_identity(session_id)
    journal = svc.journal(session_id)
    index = visible_skills(record)
    skills = session_skills(record, journal.skills_before(turn))
    # A loaded skill's tools come with it, as tools the model loaded.
    loaded = [*skill_tool_names(record, skills), *journal.tools_before(turn)]
    family = Family.of(record.options)
    # A family's sessions are shown its tools, byte for byte (runtime/family.py).
    tools = family_tools(family, extra) if family else offered_tools(record, skills, extra)
    offer = tool_offer(record, tools, loaded, family)
    tools_index = offer.index()
    skills_index = skill_index(index)
    own = None
    if family is not None:
        # The family's system prompt; its own prompt and skill index open its first message.
        prompt = system_prompt("", family.system, None, tools_index)
        # A family made of its parent's own prompt already carries the skill index.
        shown = skills_index if skills_index not in family.system else ""
        tail = (family.note, record.system_message, shown)
        own = "\n\n".join(p for p in tail if p)
    else:
        project = record.options.get(PROJECT_DOCS_OPTION) or ""
        prompt = system_prompt(record.workdir, record.system_message, index, tools_index, project)
    specs = offer.specs()
    return {
        "record": record,
        "system": Message("system", prompt),
        "preamble": own,
        "skills_index": skills_index,
        "tools_index": tools_index,
        "project": record.options.get(PROJECT_DOCS_OPTION) or "",
        "specs": specs,
        # A family's first requests on its shared prefix wait for the first of them
        # (runtime/prefix_warmup.py).
        "prefix": prefix_key(record.model, prompt, specs, own or "")
        if family and turn == 0
        else None,
        "origin": journal.next_origin(
            has_parent=record.parent_id is not None, system=record.system
        ),
    }


@dataclass(frozen=True)
class LastTurn:
    """How a one-shot session ends should its turn call no tool: stored with the turn."""

    has_parent: bool
    ending: Ending  # its final text, should the turn have none


def _store_last_turn(
    session_id: str,
    turn: int,
    write: TurnWrite,
    reply: dict[str, Any],
    last: LastTurn,
    wait: bool,
) -> dict[str, Any]:
    """Store a turn that calls no tool with the session's end (one commit), unless a
    person's message waits for the next turn, as the loop's own look would find it
    (mail_waiting); returns the turn's reply (redacted), with `end` when the session
    ended."""
    svc = services()
    ending = replace(last.ending, final_text=reply["text"] or last.ending.final_text)
    end = end_write(session_id, last.has_parent, ending)
    mail = (LAST_TURN_MAIL, f"turn:{turn + 1}")
    stored = svc.catalog.end_with_turn(session_id, write, end, mail, wait=wait)
    if stored == "stored":
        return _turn_reply(stored_event(session_id, write.key))
    if stored == "ended":
        return {**reply, "at": write.ts, "end": {"parent": after_end(session_id, end)}}
    return {**reply, "at": write.ts}


# The messages that keep a one-shot session going after a turn that calls no tool.
LAST_TURN_MAIL = ["user"]


def _turn_reply(event: EventRecord) -> dict[str, Any]:
    """What the loop needs of a stored turn (or of the provider error that ended it), and
    when it was journaled (`at`: a time a replay reads back the same)."""
    if event.kind == "error":
        return {"error": event.payload["message"], "retryable": False}
    return {
        "text": event.payload["text"],
        "tool_calls": event.payload["tool_calls"],
        "at": event.ts,
    }


def _store_turn(
    session_id: str,
    turn: int,
    record: SessionRecord,
    completion: Any,
    origin: str,
    fitted: dict[str, Any],
    then: StatusAfter | None = None,
    last: LastTurn | None = None,
    wait: bool = True,
) -> dict[str, Any]:
    """Store the model's message and usage in one transaction; returns what the loop needs.

    The session's status `then(calls)` (if any) is written in the same transaction, and so
    is the session's end, given `last` and no tool calls (see llm_turn).

    The turn's usage row also counts the summaries made to fit its prompt (fitted's
    `spent`); the message keeps the model's own counts and what the prompt measured.
    When another process stored this turn first (a worker presumed dead that was not),
    its turn is the one that counts.
    """
    svc = services()
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls]
    config, model_name = svc.provider_for(record.model)
    spent = fitted["spent"]
    counts = completion.usage.as_dict()
    cost = completion.cost_usd
    if spent["cost_usd"] is not None:
        cost = (cost or 0.0) + spent["cost_usd"]
    usage_row = {
        "turn": turn,
        "provider": config.key,
        "model": model_name,
        "cost_usd": cost,
        "estimated": completion.usage.estimated or spent["estimated"],
        **{name: value + spent["usage"].get(name, 0) for name, value in counts.items()},
    }
    key = f"turn:{turn}"
    payload = {
        "text": completion.text,
        "tool_calls": calls,
        "reasoning": completion.reasoning,
        "usage": {**counts, "estimated": completion.usage.estimated},
        "origin": origin,
        "context": fitted["context"],
    }
    if completion.blocks:
        # The vendor ran a tool of its own (its tool search): its blocks go back verbatim.
        payload["blocks"] = list(completion.blocks)
    status = then(calls) if then is not None else None
    at = time.time()
    reply = svc.redactor.redact_obj({"text": completion.text, "tool_calls": calls})
    if last is not None and not calls:
        write = TurnWrite(key, payload, usage_row, at)
        return _store_last_turn(session_id, turn, write, reply, last, wait)
    if not svc.catalog.append_event(
        session_id, key, "assistant", payload, usage_row, wait=wait, ts=at, status=status
    ):
        return _turn_reply(stored_event(session_id, key))
    return {**reply, "at": at}


async def llm_turn(
    session_id: str,
    turn: int,
    generation: int,
    inbox: list[str],
    then: StatusAfter | None = None,
    last: LastTurn | None = None,
) -> dict[str, Any]:
    """Ask the model for turn `turn`; store its message and usage; return its tool calls
    and when the turn was journaled (`at`). `then` names the status the session moves to
    with the turn's entry, from its tool calls (None: it keeps its status). Given `last`,
    a turn with no tool calls ends the session with it, unless mail waits (the reply's
    `end` then holds the parent to ring).

    The step journals itself: the catalog's `turn:N` entry is its record, so a rerun after
    a crash returns the stored turn and never asks the model twice for it. (Wrapping it in
    an engine step as well would write every turn twice.)
    """
    svc = services()
    found = await catalog_read(_look_up_turn, session_id, turn, generation, inbox)
    if "stored" in found or "ended" in found:
        return found.get("stored") or {"ended": found["ended"]}
    if found["mail"]:
        # Writes run in a thread: a wait for SQLite's write lock must not stall the event
        # loop that every other session of this process shares.
        await asyncio.to_thread(_take_mail, session_id, turn, inbox)
    extra = await toolset_tools(session_id, turn)
    prep = await catalog_read(_prompt, session_id, turn, extra)
    record = prep["record"]
    fitted = await fit_context(session_id, turn, prep)
    assert fitted is not None
    watch = TurnWatch(session_id, turn, generation)
    crash_point("llm.before")
    try:
        with turn_span(record, turn) as span:
            try:
                completion, fitted = await _complete(session_id, turn, prep, fitted, watch)
            except ProviderError as exc:
                span.failed(exc.kind, exc.one_line())
                raise
            span.completed(completion, fitted["messages"])
    except ProviderError as exc:
        message = exc.one_line()
        await asyncio.to_thread(
            svc.catalog.append_event,
            session_id,
            error_key(turn, generation),
            "error",
            {"message": message, "kind": exc.kind},
        )
        return {"error": message, "retryable": exc.retryable}
    crash_point("llm.after")
    return await catalog_write(
        _store_turn, session_id, turn, record, completion, prep["origin"], fitted, then, last
    )


async def _complete(
    session_id: str, turn: int, prep: dict[str, Any], fitted: dict[str, Any], watch: TurnWatch
) -> tuple[Any, dict[str, Any]]:
    """The model's answer to the fitted prompt, and the prompt it answered. A provider that
    says the prompt is over its window gets one compaction, then one more try."""
    model = services().model(prep["record"].model)
    try:
        async with _first_on_prefix(prep["prefix"]) as began:

            async def on_chunk() -> None:
                began()
                await watch.chunk()

            completion = await model.complete(
                fitted["messages"], prep["specs"], on_chunk=on_chunk, on_notice=watch.notice
            )
        return completion, fitted
    except ProviderError as exc:
        if exc.kind != CONTEXT_OVERFLOW:
            raise
        refitted = await fit_context(session_id, turn, prep, overflow=True)
        if refitted is None:
            raise
    completion = await model.complete(
        refitted["messages"], prep["specs"], on_chunk=watch.chunk, on_notice=watch.notice
    )
    return completion, refitted


def _first_on_prefix(key: str | None) -> AbstractAsyncContextManager[Callable[[], None]]:
    """The wait for the first request on a family's prefix (none for other requests)."""
    if key is None:
        return contextlib.nullcontext(lambda: None)
    return first_on_prefix(key)


def _refreshed(session_id: str) -> None:
    svc = services()
    svc.journal(session_id).refresh(svc.catalog)


async def compact_between_turns(session_id: str, turn: int) -> None:
    """A person's request to compact, taken while the session rests: compact now (under
    the key of the turn to come, which then finds it made), without a model turn."""
    await catalog_read(_refreshed, session_id)
    extra = await toolset_tools(session_id, turn)
    prep = await catalog_read(_prompt, session_id, turn, extra)
    await fit_context(session_id, turn, prep)


async def mail_waiting(session_id: str, turn: int, generation: int, inbox: list[str]) -> bool:
    """Whether turn `turn` would find messages to take in (a read).

    What a one-shot session asks before it ends, answered as the turn's own look-up would,
    so a rerun after a crash decides as the first run did: the turn stored means that run
    went on; this generation's end stored means it ended. The end's entry, its status and
    its parent's notice are one transaction, and no engine step comes between this read
    and it, so no recorded step and nothing anyone has seen depends on the answer.
    """
    found = await catalog_read(_look_up_turn, session_id, turn, generation, inbox)
    return "stored" in found or bool(found.get("mail"))
