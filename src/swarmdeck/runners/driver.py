"""A session run by an external runner: the runner's run as one journaled step, its result
block checked against the mode's schema, a correction through the runner's own resume.

Registered as the session kind `runner`: the loop in runtime/session.py hands such a
session to `run_runner_session`, on whichever worker took it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from swarmdeck.catalog.records import EventRecord, SessionRecord
from swarmdeck.runners import install
from swarmdeck.runners.adapters import ADAPTERS
from swarmdeck.runners.base import RUNNER_KIND, RUNNER_OPTION
from swarmdeck.runners.launch import RunnerLaunch, opted_out
from swarmdeck.runners.result_block import BEGIN, END, read_block
from swarmdeck.runners.transcript import RUNNER_SESSION_KIND
from swarmdeck.runtime.budget import check_budget
from swarmdeck.runtime.durable import Durable
from swarmdeck.runtime.services import services
from swarmdeck.runtime.status import Ending, end_session
from swarmdeck.runtime.workspaces import in_store, release, snapshot_step, store_workspace
from swarmdeck.tools.sandbox import sandbox_in_force

MAX_RESULT_ATTEMPTS = 3
# The transcript kind of a finished run: the step's journal entry.
RUN_KIND = "runner_run"
INTERRUPTED = "interrupted"
CONTINUE = (
    "Continue the task where you left off, then end your answer with the result block as "
    "the instructions say."
)


def register(svc: Any) -> None:
    """Let this process run sessions of external runners (those installed here)."""
    svc.session_drivers[RUNNER_KIND] = run_runner_session
    home = svc.settings.home
    svc.runners_here = lambda: [n for n in ADAPTERS if install.status(home, n).binary]


@dataclass
class RunnerSessionRun:
    """One generation of a runner session: what it runs, and how it ends."""

    d: Durable
    sid: str
    generation: int
    has_parent: bool
    record: SessionRecord

    async def end(self, status: str, text: str, error: str | None, reason: str) -> dict[str, Any]:
        """Record the end (idempotent) and return the workflow's outcome."""
        ending = Ending(status, text, error, reason, self.generation)
        ws_id = store_workspace(self.sid)  # before the end drops the session's identity
        await end_session(self.sid, self.has_parent, ending)
        if ws_id is not None:
            await asyncio.to_thread(release, ws_id)  # the store keeps the files
        return {"status": status, "reason": reason}

    async def once(self, attempt: int, prompt: str, resume: str | None) -> dict[str, Any]:
        """The runner's run under key `g<gen>:a<attempt>`: its stored outcome when it
        finished before; `interrupted` when it started and never finished (a crash); else
        run it now and store its outcome."""
        key = f"{RUN_KIND}:g{self.generation}:a{attempt}"
        catalog = services().catalog
        stored = await asyncio.to_thread(catalog.event_by_key, self.sid, key)
        if stored is not None:
            return stored.payload
        if not await asyncio.to_thread(catalog.mark_tool_started, self.sid, key):
            return {INTERRUPTED: True}
        outcome = await RunnerLaunch.for_session(self.record, self.generation).run(prompt, resume)
        if in_store(self.sid):
            # The files as the run left them, under the key of the entry that journals it.
            await asyncio.to_thread(snapshot_step, self.sid, key)
        payload = {
            "exit_code": outcome.exit_code,
            "final_text": outcome.final_text,
            "runner_session": outcome.runner_session,
            "stderr_tail": outcome.stderr_tail,
            "budget": outcome.budget,
            "capped": outcome.capped,
        }
        await asyncio.to_thread(catalog.append_event, self.sid, key, RUN_KIND, payload)
        return payload


async def run_runner_session(d: Durable, session_id: str, info: dict[str, Any]) -> dict[str, Any]:
    """Drive one generation of a runner session to its end."""
    svc = services()
    record = svc.session_identity(session_id)
    run = RunnerSessionRun(
        d, session_id, info["generation"], info.get("parent_id") is not None, record
    )
    refusal = await asyncio.to_thread(refusal_here, record)
    if refusal is not None:
        return await run.end("failed", "", refusal, "runner_unavailable")
    events = await asyncio.to_thread(svc.catalog.events, session_id)
    prompt, resume = first_prompt(record, events, run.generation)
    validate = _validator(record)
    outcome: dict[str, Any] = {}
    for attempt in range(MAX_RESULT_ATTEMPTS):
        spent = await asyncio.to_thread(check_budget, session_id)
        outcome = {"budget": spent} if spent else await run.once(attempt, prompt, resume)
        if outcome.get(INTERRUPTED):
            return await run.end("failed", "", interrupted_error(session_id), INTERRUPTED)
        if outcome.get("budget"):
            # Stopped where the budget ran out: what it said so far is the partial result.
            text = outcome.get("final_text", "")
            return await run.end("budget_exceeded", text, outcome["budget"], "budget")
        if outcome.get("capped"):
            return await run.end("completed", outcome.get("final_text", ""), None, "step_cap")
        text = outcome["final_text"]
        reading = read_block(text, validate)
        if reading.state == "parsed":
            await asyncio.to_thread(svc.catalog.update_session, session_id, result=reading.result)
            return await run.end("completed", text, None, "model_done")
        if outcome["exit_code"] != 0 and not text.strip():
            error = _runner_failed(record, outcome)
            return await run.end("failed", "", error, "provider_error")
        resume = outcome.get("runner_session") or resume
        if resume is None:
            break  # nothing to correct through
        prompt = correction(reading.error or "no result block")
    return await run.end("completed", outcome.get("final_text", ""), None, "result_malformed")


def refusal_here(record: SessionRecord) -> str | None:
    """Why this host cannot run the session's runner (None: it can)."""
    svc = services()
    name = record.options.get(RUNNER_OPTION)
    if name not in ADAPTERS:
        return f"unknown runner {name!r}: use one of {', '.join(sorted(ADAPTERS))}"
    state = install.status(svc.settings.home, name)
    if state.binary is None:
        return (
            f"runner {name} is not installed on host {svc.settings.hostname}: run "
            f"`swarmdeck runner install {name}` there"
        )
    unconfined = opted_out(record)
    sandbox = sandbox_in_force(unconfined)
    if not sandbox.available and not unconfined:
        return (
            f"runner {name} needs a sandbox and none works here ({sandbox.reason}); install "
            "bubblewrap, or accept running without one: --no-sandbox"
        )
    return None


def first_prompt(
    record: SessionRecord, events: list[EventRecord], generation: int
) -> tuple[str, str | None]:
    """This generation's prompt and the runner session it resumes (None: a new one).

    The first run gets the mode's instructions and the task; a resume gets the planner's
    new instruction (or, run again after a failure, a request to continue) in the runner's
    own session.
    """
    resume = next(
        (e.payload["id"] for e in reversed(events) if e.kind == RUNNER_SESSION_KIND), None
    )
    if resume is None:
        task = next((e.payload["text"] for e in events if e.kind == "task"), "")
        return f"{record.system_message or ''}\n\n# Your task\n\n{task}".strip(), None
    asked = next((e for e in events if e.key == f"resume:{generation}"), None)
    if asked is not None:
        return f"{asked.payload['text']}\n\n{CONTINUE}", resume
    return CONTINUE, resume


def correction(error: str) -> str:
    """The correction turn: what was wrong, and the block again."""
    return (
        f"Your answer's result block was not accepted: {error}. Reply with only the "
        f"corrected result block, between {BEGIN} and {END}, holding one JSON object in "
        "the schema you were given."
    )


def interrupted_error(session_id: str) -> str:
    """Why a run cut off by a crash was not run again."""
    return (
        "the runner's run was cut off by a crash of its worker and was not run again, "
        "since it may have changed files; check the workdir, then `swarmdeck dispatch "
        f"--mode resume --session {session_id}` continues it in the runner's own session"
    )


def _runner_failed(record: SessionRecord, outcome: dict[str, Any]) -> str:
    tail = (outcome.get("stderr_tail") or "").strip().splitlines()
    last = tail[-1] if tail else "no message"
    return f"runner {record.options.get(RUNNER_OPTION)} exited {outcome['exit_code']}: {last}"


def _validator(record: SessionRecord) -> Any:
    schema = record.options.get("result_schema", record.mode)
    check = services().result_validators.get(schema)
    if check is not None:
        return check
    return lambda result: None if isinstance(result, dict) else "result must be an object"
