"""One tool call as a durable step, by its effect class; a submitted result; a cron's check."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.runtime.catalog_io import catalog_read, catalog_write, stored_event
from swarmdeck.runtime.crashpoints import crash_point
from swarmdeck.runtime.journal import Journal
from swarmdeck.runtime.offered import offered_tools, session_skills, tool_context, toolset_tools
from swarmdeck.runtime.origin import CRON
from swarmdeck.runtime.services import services
from swarmdeck.runtime.status import describe_error
from swarmdeck.runtime.tool_output import shrink
from swarmdeck.runtime.traced import tool_span
from swarmdeck.runtime.workspaces import in_store, snapshot_step
from swarmdeck.tools.base import Effect, ToolOutcome
from swarmdeck.tools.tool_index import LOAD_TOOLS

SUBMIT_RESULT = "submit_result"


async def record_result(
    session_id: str,
    turn: int,
    call: dict[str, Any],
    content: str,
    is_error: bool,
    status: str | None = None,
) -> float:
    """Store the result of a control tool call, journaled like any tool call's: under its
    `tool:N:ID` key, idempotent; with the session's new `status`, if any, in the same
    transaction. Returns when it was journaled. A rerun after a crash replays the tool's
    own recorded steps, so it stores the same result, once (an engine step around the
    write as well would journal it twice)."""
    outcome = ToolOutcome(content, is_error)
    return float(await catalog_write(_store_call, session_id, turn, call, outcome, status))


def store_result(
    session_id: str, turn: int, call: dict[str, Any], content: str, is_error: bool
) -> None:
    """record_result from code that runs inside a step of its own (the swarm's checks)."""
    _store_call(session_id, turn, call, ToolOutcome(content, is_error))


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
        return {"stored": stored.ts}
    record = svc.session_identity(session_id)
    journal = svc.journal(session_id)
    skills = session_skills(record, journal.skills_before(turn))
    # load_tools checks names against every tool of the session, its MCP servers' too.
    wide = svc.tools.get(call["name"]) is None or call["name"] == LOAD_TOOLS
    extra = await toolset_tools(session_id, turn) if wide else []
    offered = offered_tools(record, skills, extra)
    tool = next((t for t in offered if t.name == call["name"]), None)
    if tool is None:
        return {
            "outcome": ToolOutcome(f"error: no tool named {call['name']} in this session", True)
        }
    if tool.effect is Effect.ONCE and not await asyncio.to_thread(
        svc.catalog.mark_tool_started, session_id, call_key
    ):
        return {"outcome": ToolOutcome(INTERRUPTED, is_error=True)}
    origin = await catalog_read(_turn_origin, journal, turn)
    context = tool_context(record, call_key, origin)
    context.services["tool_index"] = offered
    return {"tool": tool, "context": context}


def _turn_origin(journal: Journal, turn: int) -> str:
    """What started turn `turn`, as journaled with it (read once if this process stored the
    turn after its last refresh)."""
    event = journal.get(f"turn:{turn}")
    if event is None:
        journal.refresh(services().catalog)
        event = journal.get(f"turn:{turn}")
    return event.payload.get("origin", "") if event is not None else ""


def _store_call(
    session_id: str,
    turn: int,
    call: dict[str, Any],
    outcome: ToolOutcome,
    status: str | None = None,
    wait: bool = True,
) -> float:
    """Journal a call's result (and the session's new status with it); returns when it
    was journaled: now, or when a first run stored it."""
    svc = services()
    key = f"tool:{turn}:{call['id']}"
    payload = {"call_id": call["id"], "name": call["name"], **_outcome_dict(outcome)}
    at = time.time()
    if not svc.catalog.append_event(
        session_id, key, "tool_result", payload, wait=wait, ts=at, status=status
    ):
        return stored_event(session_id, key).ts
    return at


async def tool_call(
    session_id: str, turn: int, call: dict[str, Any], status: str | None = None
) -> float:
    """Run one tool call by its effect class and store its result in the transcript (with
    the session's new `status`, if any); returns when the result was journaled.

    Journaled like a turn: the `tool:N:ID` entry is the step's record.
    """
    prep = await _prepare_call(session_id, turn, call)
    if "stored" in prep:
        return float(prep["stored"])
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
        if prep["tool"].effect is not Effect.READ and in_store(session_id):
            # The files after this step, keyed to its journal entry, before that lands.
            await asyncio.to_thread(snapshot_step, session_id, f"tool:{turn}:{call['id']}")
            crash_point("tool.snapshotted")
    outcome = await asyncio.to_thread(shrink, session_id, turn, call["id"], outcome)
    return float(await catalog_write(_store_call, session_id, turn, call, outcome, status))


CHECK_PREVIEW = 4000


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
