"""The durable steps of a session: one LLM turn, one tool call, result and status writes.

Each step may run again after a crash (at-least-once). Every step therefore checks the
catalog first: a turn or tool result already stored is returned, never produced twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmdeck.catalog import fence
from swarmdeck.catalog.catalog import WriteWouldWait
from swarmdeck.catalog.records import RESUMED_KIND, EventRecord, SessionRecord
from swarmdeck.errors import ProviderError, SwarmdeckError
from swarmdeck.models.errors import CONTEXT_OVERFLOW
from swarmdeck.models.types import Message
from swarmdeck.plugins.aliases import resolve_tools
from swarmdeck.plugins.definitions import SkillDef
from swarmdeck.runtime.context import fit_context
from swarmdeck.runtime.crashpoints import crash_point
from swarmdeck.runtime.journal import Journal
from swarmdeck.runtime.mgmt_ops import RuntimeMgmtOps
from swarmdeck.runtime.origin import CRON
from swarmdeck.runtime.prompts import skill_index, system_prompt
from swarmdeck.runtime.services import services
from swarmdeck.runtime.tool_output import shrink
from swarmdeck.runtime.traced import tool_span, turn_span
from swarmdeck.runtime.tree import drain_inbox, model_resting, parent_notice, ring
from swarmdeck.runtime.turn_watch import TurnWatch
from swarmdeck.runtime.workflow_ids import workflow_id
from swarmdeck.tools.base import READ_ONLY_MODES, Effect, Tool, ToolContext, ToolOutcome
from swarmdeck.tools.builtins.skills import LOAD_SKILL
from swarmdeck.tools.toolsets import SessionScope
from swarmdeck.workspace.gitdirs import git_dirs_outside

SUBMIT_RESULT = "submit_result"


def session_skills(record: SessionRecord, loaded: list[str]) -> list[str]:
    """The skills in force for a turn: the agent's preloaded ones, then those loaded."""
    preloaded = list(record.options.get("skills") or [])
    return preloaded + [s for s in loaded if s not in preloaded]


def offered_tools(
    record: SessionRecord, skills: list[str] | None = None, extra: list[Tool] | None = None
) -> list[Tool]:
    """The tools this session's model is shown: its mode's, narrowed by its tool_names,
    those of its toolsets (`extra`: its MCP servers'), and those its skills bring (still
    only the mode's)."""
    svc = services()
    tools = svc.tools.for_mode(record.mode, record.tool_names)
    if extra:
        taken = {t.name for t in tools}
        tools += [t for t in extra if t.name not in taken]
    if not skills:
        return tools
    plugin_set = svc.session_plugins(record)
    names = {t.name for t in tools}
    for skill_name in skills:
        skill = plugin_set.skills.get(skill_name)
        for name in resolve_tools(skill.tools if skill else []):
            tool = svc.tools.get(name)
            if tool is not None and name not in names and record.mode in tool.modes:
                tools.append(tool)
                names.add(name)
    return tools


def visible_skills(record: SessionRecord) -> list[SkillDef]:
    """The skills this session's index lists (none when it cannot load them)."""
    svc = services()
    if record.tool_names is not None and LOAD_SKILL not in record.tool_names:
        return []
    plugin_set = svc.session_plugins(record)
    agent = plugin_set.agent(record.agent) if record.agent else None
    return plugin_set.skills_for(agent)


def tool_context(record: SessionRecord, call_key: str = "", origin: str = "") -> ToolContext:
    """The context a tool of this session runs with."""
    svc = services()
    config, _ = svc.provider_for(record.model)
    workdir = Path(record.workdir)
    extras: dict[str, Any] = {}
    if svc.engine_ops is not None:
        extras["mgmt_ops"] = RuntimeMgmtOps(svc.engine_ops)
    return ToolContext(
        session_id=record.id,
        workdir=workdir,
        mode=record.mode,
        run_dir=Path(record.run_dir),
        services={
            "network": config.network,
            # --no-sandbox: the user accepts shell tools without a sandbox (tools/shell.py).
            "no_sandbox": bool(record.options.get("no_sandbox")),
            "hidden_paths": [svc.settings.credentials_dir],
            "extra_writable": [] if record.mode in READ_ONLY_MODES else git_dirs_outside(workdir),
            "catalog": svc.catalog,
            "settings": svc.settings,
            "plugins": svc.session_plugins(record),
            "skills": {s.name: s for s in visible_skills(record)},
            "tool_names": svc.tools.names(),
            "available_models": svc.available_models,
            **extras,
        },
        call_key=call_key,
        origin=origin,
    )


BUDGET_KEYS = ("max_tokens", "max_cost", "max_turns_total")


async def start_generation(session_id: str, generation: int) -> dict[str, Any]:
    """What the loop needs to run this generation of the session (see load_session)."""
    return (await begin_execution(session_id, generation))[0]


async def begin_execution(session_id: str, generation: int) -> tuple[dict[str, Any], int]:
    """Start an execution of the generation's workflow: what the loop needs, and the epoch
    this execution writes under (see catalog/fence.py)."""
    return await asyncio.to_thread(load_session, session_id, generation)


def load_session(session_id: str, generation: int) -> tuple[dict[str, Any], int]:
    """The parts of the session record the loop needs, and this execution's epoch; marks
    the session running and takes in the messages that arrived while no worker ran it.

    Journaled like a turn: the first run stores what it found as the generation's start,
    and a rerun after a crash returns that, so the loop takes the same path as before even
    though the session (its cron, its turns) has moved on since. Every run claims the
    session under a new epoch before it writes anything, which fences off the one before.
    """
    svc = services()
    executor = svc.executor_id()
    stored = svc.catalog.generation_start(session_id, generation)
    if stored is not None:
        return stored, _resume_run(session_id, generation, executor)
    record, turns_done = svc.catalog.open_run(session_id, executor)
    fence.enter(session_id, record.epoch)
    if record.terminal or record.generation != generation:
        # Ended, or superseded by a newer generation before this one ever ran.
        return {"terminal": True, "status": record.status}, record.epoch
    taken = drain_inbox(session_id, f"g{generation}:start", None, record=True)
    chain = _with_ancestors(record)
    journal = svc.journal(session_id)
    journal.refresh(svc.catalog)
    info = {
        # The model ended its last turn and nothing came after it (a rolled-over generation).
        "resting": turns_done > 0 and not taken and model_resting(session_id),
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
        "budgeted": any(_budget(s) for s in chain),
        "rollover_iterations": int(
            record.options.get("rollover_iterations", svc.settings.rollover_iterations)
        ),
    }
    return svc.catalog.keep_generation_start(session_id, generation, info), record.epoch


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


def _with_ancestors(record: SessionRecord) -> list[SessionRecord]:
    """The session, its parent, grandparent... up to the root: whose budgets cover it."""
    catalog = services().catalog
    chain = [record]
    while chain[-1].parent_id:
        chain.append(catalog.get_session(chain[-1].parent_id))
    return chain


def _budget(record: SessionRecord) -> dict[str, float]:
    budget = record.options.get("budget") or {}
    return {k: float(v) for k, v in budget.items() if k in BUDGET_KEYS and v is not None}


def check_budget(session_id: str) -> str | None:
    """None while the session and every ancestor are within budget; else why not.

    A child draws from its parent's budget: an ancestor's budget covers its whole subtree.
    """
    catalog = services().catalog
    for record in _with_ancestors(catalog.get_session(session_id)):
        budget, sid = _budget(record), record.id
        if not budget:
            continue
        used = catalog.usage_totals([sid, *catalog.descendant_ids(sid)])
        spent = {
            # A token read from a prompt cache is still a token of the prompt.
            "max_tokens": used.input + used.cache_read + used.cache_write + used.output,
            "max_cost": used.cost_usd or 0.0,
            "max_turns_total": used.turns,
        }
        for key, limit in budget.items():
            if spent[key] >= limit:
                owner = "its" if sid == session_id else f"ancestor {sid}'s"
                return f"budget exceeded: {key} {spent[key]:g} of {owner} limit {limit:g}"
    return None


async def record_result(
    session_id: str, turn: int, call: dict[str, Any], content: str, is_error: bool
) -> None:
    """Store the result of a control tool call, journaled like any tool call's: under its
    `tool:N:ID` key, idempotent. A rerun after a crash replays the tool's own recorded
    steps, so it stores the same result, once (an engine step around the write as well
    would journal it twice)."""
    await _write(_store_call, session_id, turn, call, ToolOutcome(content, is_error))


def store_result(
    session_id: str, turn: int, call: dict[str, Any], content: str, is_error: bool
) -> None:
    """record_result from code that runs inside a step of its own (the swarm's checks)."""
    _store_call(session_id, turn, call, ToolOutcome(content, is_error))


def append_event(session_id: str, key: str, kind: str, payload: dict[str, Any]) -> None:
    """Append one transcript entry (idempotent by key)."""
    services().catalog.append_event(session_id, key, kind, payload)


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
        svc.journal(session_id).refresh(svc.catalog)


async def toolset_tools(session_id: str, turn: int) -> list[Tool]:
    """The tools the session's toolsets (its MCP servers) offer now; what it should be told
    about them (a server that did not start) joins its transcript, once."""
    svc = services()
    if not svc.toolsets:
        return []
    record = svc.session_identity(session_id)
    scope = session_scope(record)
    tools: list[Tool] = []
    for toolset in svc.toolsets:
        found = await toolset.tools_for(scope)
        tools += found.tools
        for key, text in found.notices:
            payload = {"what": "toolset", "reason": text, "wait_s": 0, "text": text}
            await _write(_append_notice, session_id, key, payload)
    return tools


def _append_notice(session_id: str, key: str, payload: dict[str, Any], wait: bool = True) -> None:
    services().catalog.append_event(session_id, key, "notice", payload, wait=wait)


def session_scope(record: SessionRecord) -> SessionScope:
    """What a toolset may know of the session."""
    plugins = tuple(services().session_plugins(record).plugins)
    return SessionScope(record.id, record.mode, Path(record.workdir), record.options, plugins)


def _prompt(session_id: str, turn: int, extra: list[Tool]) -> dict[str, Any]:
    """What the model call needs: the session's prompt, conversation and tools, and what
    started the turn."""
    svc = services()
    record = svc.session_identity(session_id)
    journal = svc.journal(session_id)
    index = visible_skills(record)
    prompt = system_prompt(record.workdir, record.system_message, index)
    skills = session_skills(record, journal.skills_before(turn))
    return {
        "record": record,
        "system": Message("system", prompt),
        "skills_index": skill_index(index),
        "specs": [t.spec() for t in offered_tools(record, skills, extra)],
        "origin": journal.next_origin(
            has_parent=record.parent_id is not None, system=record.system
        ),
    }


async def _write(fn: Callable[..., Any], *args: Any) -> Any:
    """A one-transaction catalog write: on SQLite, on the loop when the write lock is free
    at once (the common case, and a thread hand-off cost more than the write); in a
    thread, where waiting for the lock harms no other session, when it is not."""
    if services().catalog.is_sqlite:
        try:
            return fn(*args, wait=False)
        except WriteWouldWait:
            pass
    return await asyncio.to_thread(fn, *args)


async def _read(fn: Callable[..., Any], *args: Any) -> Any:
    """Catalog reads: inline on SQLite, in a thread elsewhere.

    A WAL reader never waits for a lock, and a thread hand-off cost more than the read
    itself (measured: 0.6 ms a turn). On PostgreSQL a read is a network round trip, which
    must not hold up the loop every other session of this process shares.
    """
    if services().catalog.is_sqlite:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


def _turn_reply(event: EventRecord) -> dict[str, Any]:
    """What the loop needs of a stored turn (or of the provider error that ended it)."""
    if event.kind == "error":
        return {"error": event.payload["message"], "retryable": False}
    return {"text": event.payload["text"], "tool_calls": event.payload["tool_calls"]}


def _store_turn(
    session_id: str,
    turn: int,
    record: SessionRecord,
    completion: Any,
    origin: str,
    fitted: dict[str, Any],
    wait: bool = True,
) -> dict[str, Any]:
    """Store the model's message and usage in one transaction; returns what the loop needs.

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
    if not svc.catalog.append_event(session_id, key, "assistant", payload, usage_row, wait=wait):
        return _turn_reply(_stored(session_id, key))
    return svc.redactor.redact_obj({"text": completion.text, "tool_calls": calls})


def _stored(session_id: str, key: str) -> EventRecord:
    """An event the catalog reported as already stored."""
    event = services().catalog.event_by_key(session_id, key)
    assert event is not None, f"{key} reported stored but not found"
    return event


async def llm_turn(session_id: str, turn: int, generation: int, inbox: list[str]) -> dict[str, Any]:
    """Ask the model for turn `turn`; store its message and usage; return its tool calls.

    The step journals itself: the catalog's `turn:N` entry is its record, so a rerun after
    a crash returns the stored turn and never asks the model twice for it. (Wrapping it in
    an engine step as well would write every turn twice.)
    """
    svc = services()
    found = await _read(_look_up_turn, session_id, turn, generation, inbox)
    if "stored" in found or "ended" in found:
        return found.get("stored") or {"ended": found["ended"]}
    if found["mail"]:
        # Writes run in a thread: a wait for SQLite's write lock must not stall the event
        # loop that every other session of this process shares.
        await asyncio.to_thread(_take_mail, session_id, turn, inbox)
    extra = await toolset_tools(session_id, turn)
    prep = await _read(_prompt, session_id, turn, extra)
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
    return await _write(_store_turn, session_id, turn, record, completion, prep["origin"], fitted)


async def _complete(
    session_id: str, turn: int, prep: dict[str, Any], fitted: dict[str, Any], watch: TurnWatch
) -> tuple[Any, dict[str, Any]]:
    """The model's answer to the fitted prompt, and the prompt it answered. A provider that
    says the prompt is over its window gets one compaction, then one more try."""
    model = services().model(prep["record"].model)
    try:
        completion = await model.complete(
            fitted["messages"], prep["specs"], on_chunk=watch.chunk, on_notice=watch.notice
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


async def mail_waiting(session_id: str, turn: int, generation: int, inbox: list[str]) -> bool:
    """Whether turn `turn` would find messages to take in (a read).

    What a one-shot session asks before it ends, answered as the turn's own look-up would,
    so a rerun after a crash decides as the first run did: the turn stored means that run
    went on; this generation's end stored means it ended. The end's entry, its status and
    its parent's notice are one transaction, and no engine step comes between this read
    and it, so no recorded step and nothing anyone has seen depends on the answer.
    """
    found = await _read(_look_up_turn, session_id, turn, generation, inbox)
    return "stored" in found or bool(found.get("mail"))


def _outcome_dict(outcome: ToolOutcome) -> dict[str, Any]:
    return {
        "content": outcome.content,
        "is_error": outcome.is_error,
        "permission_denied": outcome.permission_denied,
    }


INTERRUPTED = (
    "interrupted: this call was cut off by a crash before it finished and was not run again, "
    "because it may have side effects. Check the current state, then decide whether to call "
    "it again."
)


async def _prepare_call(session_id: str, turn: int, call: dict[str, Any]) -> dict[str, Any]:
    """The stored result, or the tool and whether it may run.

    The journal was brought up to date by this turn's step, so a result stored before a
    crash is found there without a read.
    """
    svc = services()
    call_key = f"{turn}:{call['id']}"
    stored = svc.journal(session_id).get(f"tool:{call_key}")
    if stored is not None:
        return {"stored": stored.payload}
    record = svc.session_identity(session_id)
    journal = svc.journal(session_id)
    skills = session_skills(record, journal.skills_before(turn))
    extra = await toolset_tools(session_id, turn) if svc.tools.get(call["name"]) is None else []
    tool = next((t for t in offered_tools(record, skills, extra) if t.name == call["name"]), None)
    if tool is None:
        return {
            "outcome": ToolOutcome(f"error: no tool named {call['name']} in this session", True)
        }
    if tool.effect is Effect.ONCE and not await asyncio.to_thread(
        svc.catalog.mark_tool_started, session_id, call_key
    ):
        return {"outcome": ToolOutcome(INTERRUPTED, is_error=True)}
    origin = await _read(_turn_origin, journal, turn)
    return {"tool": tool, "context": tool_context(record, call_key, origin)}


def _turn_origin(journal: Journal, turn: int) -> str:
    """What started turn `turn`, as journaled with it (read once if this process stored the
    turn after its last refresh)."""
    event = journal.get(f"turn:{turn}")
    if event is None:
        journal.refresh(services().catalog)
        event = journal.get(f"turn:{turn}")
    return event.payload.get("origin", "") if event is not None else ""


def _store_call(
    session_id: str, turn: int, call: dict[str, Any], outcome: ToolOutcome, wait: bool = True
) -> dict[str, Any]:
    svc = services()
    key = f"tool:{turn}:{call['id']}"
    payload = {"call_id": call["id"], "name": call["name"], **_outcome_dict(outcome)}
    if not svc.catalog.append_event(session_id, key, "tool_result", payload, wait=wait):
        return _stored(session_id, key).payload
    return svc.redactor.redact_obj(payload)


async def tool_call(session_id: str, turn: int, call: dict[str, Any]) -> dict[str, Any]:
    """Run one tool call by its effect class and store its result in the transcript.

    Journaled like a turn: the `tool:N:ID` entry is the step's record.
    """
    prep = await _prepare_call(session_id, turn, call)
    if "stored" in prep:
        return prep["stored"]
    outcome = prep.get("outcome")
    if outcome is None:
        crash_point("tool.before")
        with tool_span(session_id, call, str(prep["tool"].effect)) as span:
            try:
                outcome = await prep["tool"].call(prep["context"], call["arguments"])
            except Exception as exc:
                # A tool that raises (a bug, a user tool's own error) fails this call, which
                # the model sees and can act on; it must not take the whole session down.
                outcome = ToolOutcome(f"error: {describe_error(exc)}", is_error=True)
            span.finished(outcome.content, outcome.is_error)
        crash_point("tool.after")
    outcome = await asyncio.to_thread(shrink, session_id, turn, call["id"], outcome)
    return await _write(_store_call, session_id, turn, call, outcome)


CHECK_PREVIEW = 4000
# A system agent's rollover drops the engine history of its earlier generations (this
# many are looked back at, in case a crash skipped a drop).
HISTORY_DROP_WINDOW = 5


async def drop_old_generations(session_id: str, generation: int) -> int:
    """Delete the engine history of a session's generations before this one (they
    ended; the catalog keeps the transcript): a system agent that runs for months keeps a
    bounded step log without a model call. Returns the runs deleted."""
    from swarmdeck.catalog.housekeeping import forget_generations

    svc = services()
    if svc.engine_ops is None:
        return 0
    old = range(max(0, generation - HISTORY_DROP_WINDOW), generation)
    deleted = await svc.engine_ops.delete_workflows([workflow_id(session_id, g) for g in old])
    await asyncio.to_thread(forget_generations, svc.catalog, [(session_id, g) for g in old])
    return len(deleted)


async def run_check(session_id: str, cron: dict[str, Any], fired_at: float) -> dict[str, Any]:
    """Run a cron's check tool before the model is woken: {quiet, content}.

    A step of the loop (its result is recorded), so a replay decides as the first run did.
    The check must be a tool the session is offered, and safe to run again.
    """
    svc = services()
    name = cron["check"]
    record = svc.session_identity(session_id)
    journal = svc.journal(session_id)
    journal.refresh(svc.catalog)
    skills = session_skills(record, list(journal.loaded))
    tool = next((t for t in offered_tools(record, skills) if t.name == name), None)
    if tool is None:
        return {
            "quiet": False,
            "content": f"error: the cron's check {name} is not one of your tools",
        }
    if tool.effect is Effect.ONCE:
        return {"quiet": False, "content": f"error: {name} may have side effects: not a check"}
    ctx = tool_context(record, f"cron:{fired_at}", CRON)
    try:
        outcome = await tool.call(ctx, json.dumps(cron.get("check_args") or {}))
    except Exception as exc:
        outcome = ToolOutcome(f"error: {describe_error(exc)}", is_error=True)
    quiet = outcome.quiet and not outcome.is_error
    return {"quiet": quiet, "content": svc.redactor.redact(outcome.content[:CHECK_PREVIEW])}


def submit_result(
    session_id: str, turn: int, call: dict[str, Any], tries_left: int
) -> dict[str, Any]:
    """Validate a submitted result against the session's schema; store it when valid.

    `tries_left` is how many more submissions the session allows after a rejection of this
    one: with none left the model is told the run ends without a result, not to retry.
    """
    svc = services()
    event_key = f"tool:{turn}:{call['id']}"
    stored = svc.catalog.event_by_key(session_id, event_key)
    if stored is not None:
        return stored.payload
    record = svc.session_identity(session_id)
    error, result = _validate_submission(record, call["arguments"])
    if error is None:
        svc.catalog.update_session(session_id, result=result)
        content, accepted = "result accepted", True
    else:
        content, accepted = (
            f"error: result rejected: {error}. {_after_rejection(tries_left)}",
            False,
        )
    payload = {
        "call_id": call["id"],
        "name": SUBMIT_RESULT,
        "content": content,
        "is_error": not accepted,
        "permission_denied": False,
        "accepted": accepted,
        "error": error,
    }
    svc.catalog.append_event(session_id, event_key, "tool_result", payload)
    return svc.redactor.redact_obj(payload)


def _after_rejection(tries_left: int) -> str:
    if tries_left <= 0:
        return "That was the last try: the result was not accepted, and the run ends without one."
    tries = "1 try" if tries_left == 1 else f"{tries_left} tries"
    return f"Fix it and call submit_result again ({tries} left)."


def _validate_submission(record: SessionRecord, raw: str) -> tuple[str | None, Any]:
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        return f"arguments are not valid JSON ({exc.msg})", None
    result = args.get("result", args) if isinstance(args, dict) else args
    validator = services().result_validators.get(record.options.get("result_schema", record.mode))
    if validator is None:
        return (None, result) if isinstance(result, dict) else ("result must be an object", None)
    return validator(result), result


@dataclass(frozen=True)
class Ending:
    """How a generation of a session ended: what its end records (the verdict classifies
    on the reason)."""

    status: str
    final_text: str
    error: str | None
    reason: str
    generation: int


async def end_session(session_id: str, has_parent: bool, ending: Ending) -> None:
    """Record how the session ended, with its parent's notice, then ring the parent.

    The end and the notice are one transaction, so a parent that sees this session ended
    (wait_for_agents) finds its update in the inbox; the doorbell rings after, so a parent
    it wakes finds the session ended. Both parts are idempotent: a rerun after a crash in
    between repeats nothing.
    """
    parent = await asyncio.to_thread(_record_end, session_id, has_parent, ending)
    if parent is not None:
        crash_point("message.posted")  # the notice is stored, the doorbell not rung yet
        await ring(parent)


def _record_end(session_id: str, has_parent: bool, ending: Ending) -> str | None:
    """Store the end and the parent's notice; returns the parent to ring."""
    svc = services()
    fields: dict[str, Any] = {"status": ending.status, "final_text": ending.final_text}
    if ending.error:
        fields["error"] = ending.error
    entry = {"status": ending.status, "error": ending.error, "reason": ending.reason}
    notice = None
    if has_parent:
        child = svc.catalog.get_session(session_id)
        notice = parent_notice(child, ending.status, ending.final_text)
    svc.catalog.end_session(session_id, f"end:g{ending.generation}", entry, notice, **fields)
    svc.forget(session_id)
    return notice.session_id if notice is not None else None


def set_status(session_id: str, status: str) -> None:
    """Record a status change (waiting, idle, input_required...)."""
    services().catalog.set_status(session_id, status)


def last_model_text(session_id: str) -> str:
    """The text of the session's last stored model turn ("" when there is none)."""
    event = services().catalog.last_event(session_id, ["assistant"])
    return event.payload["text"] if event is not None else ""


DESCRIBE_MAX = 500


def describe_error(exc: BaseException) -> str:
    """One line for an unexpected failure inside a step. For a database error, the
    driver's own first line: not the statement, nor its parameters (the very text that
    may have failed to be stored)."""
    if isinstance(exc, SwarmdeckError):
        return exc.one_line()
    cause = getattr(exc, "orig", None)
    lines = str(cause if cause is not None else exc).strip().splitlines()
    first = " ".join(lines[0].split()) if lines else ""
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text if len(text) <= DESCRIBE_MAX else text[: DESCRIBE_MAX - 1] + "…"
