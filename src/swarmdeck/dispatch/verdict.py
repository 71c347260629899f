"""The verdict: how a dispatched run ended, classified in the contract's order."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from swarmdeck.catalog.records import EventRecord, UsageTotals
from swarmdeck.dispatch.result_block import ParseState, read_block

# 2: a long final text without a result is `unstructured`, no longer `completed`; a
# result still invalid after the last correction is `malformed`, no longer `empty`.
# 3: a run its budget stopped is `budget_exhausted` (version 2 said `budget_exceeded`).
SCHEMA_VERSION = "3"
VERDICT_TYPE = "swarmdeck.verdict"
STARTED_TYPE = "swarmdeck.started"
ERROR_TYPE = "swarmdeck.error"
# A final text this long without a result is `unstructured` (the model answered in prose).
UNSTRUCTURED_TEXT_CHARS = 200
STDERR_TAIL_BYTES = 500
NO_MODEL_OUTPUT = "no model output"
EXIT_COMPLETED = 0
EXIT_USAGE = 2
EXIT_NOT_COMPLETED = 3
EXIT_TIMEOUT = 124

VerdictClass = Literal[
    "completed",
    "step_capped_partial",
    "budget_exhausted",
    "error",
    "malformed",
    "unstructured",
    "empty",
]
# The verdicts whose runs left diagnostics worth a look (`stderr_tail`).
TAILED_VERDICTS = frozenset({"error", "unstructured", "empty"})
# The session's end reason when the model's last allowed submission was rejected too.
RESULT_ATTEMPTS_USED_UP = "result_malformed"
# Session end reasons that mean the run failed.
FAILURE_REASONS = frozenset({"provider_error", "cancelled", "crashed", "worker_killed"})


class Tokens(BaseModel):
    """Token counts summed over the run."""

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0


class ToolErrors(BaseModel):
    """Tool calls that failed, by kind (result submissions are not counted here)."""

    permission_denied: int = 0
    other: int = 0


class Started(BaseModel):
    """The first line of `dispatch`: what is running and where to watch it."""

    type: Literal["swarmdeck.started"] = STARTED_TYPE
    schema_version: str = SCHEMA_VERSION
    run_id: str
    session_id: str
    provider: str
    model: str
    mode: str
    workdir: str
    timeout_s: float | None
    idle_timeout_s: float | None
    log_path: str
    events_path: str
    # What confines the worker's tools: bwrap, landlock or none.
    sandbox: Literal["bwrap", "landlock", "none"] | None = None


class Delivered(BaseModel):
    """How a store workspace's changes came back to the planner's host."""

    kind: Literal["branch", "patch"]
    branch: str | None = None  # swarmdeck/<run>, in `repo`
    repo: str | None = None
    patch_path: str | None = None
    files: list[str] = Field(default_factory=list)  # relative to the workdir
    note: str | None = None  # why a branch was asked for and a patch came


class Verdict(BaseModel):
    """The last line of `dispatch`: every field of the contract, plus how the run ended."""

    type: Literal["swarmdeck.verdict"] = VERDICT_TYPE
    schema_version: str = SCHEMA_VERSION
    run_id: str | None = None
    session_id: str | None = None
    provider: str | None = None
    model: str | None = None
    mode: str
    verdict: VerdictClass
    exit_code: int
    timed_out: bool = False
    idle_timed_out: bool = False
    interrupted: bool = False
    steps: int = 0
    step_cap: int | None = None
    duration_s: float = 0.0
    tokens: Tokens = Field(default_factory=Tokens)
    cost_usd: float | None = None
    tool_errors: ToolErrors = Field(default_factory=ToolErrors)
    parse_state: ParseState
    parse_error: str | None = None
    result: dict[str, Any] | None = None
    final_text_path: str | None = None
    artifacts: list[str] = Field(default_factory=list)
    # As in `started`; null only in a verdict fanout made up for a worker that printed none.
    sandbox: Literal["bwrap", "landlock", "none"] | None = None
    stderr_tail: str | None = None
    # Beyond the table: why the run ended (submitted, model_done, step_cap, timeout...),
    # whether fanout made this verdict up for a worker that printed none, and the files.
    reason: str | None = None
    synthesized: bool = False
    workdir: str | None = None
    log_path: str | None = None
    events_path: str | None = None
    # A session with its workspace in the store (--workspace store): its changes, brought
    # back as a branch or a patch; null for a shared workspace.
    delivered: Delivered | None = None

    def line(self) -> str:
        """The verdict as one JSON line."""
        return self.model_dump_json()


def classify(
    *,
    reason: str | None,
    parse_state: str,
    failed: bool,
    timed_out: bool,
    idle_timed_out: bool,
    interrupted: bool,
    final_text: str,
) -> VerdictClass:
    """The contract's classification; the first rule that matches wins.

    Only `completed` carries a validated result: a long text without one is `unstructured`.
    """
    if reason == "step_cap":
        return "step_capped_partial"
    if reason == "budget":
        return "budget_exhausted"
    if parse_state == "parsed":
        return "completed"
    if failed or timed_out or idle_timed_out or interrupted:
        return "error"
    if parse_state == "malformed":
        return "malformed"
    if len(final_text) >= UNSTRUCTURED_TEXT_CHARS:
        return "unstructured"
    return "empty"


@dataclass(frozen=True)
class ResultReading:
    """The run's result, how it was read, and why it is null when it is."""

    state: ParseState
    result: dict[str, Any] | None
    error: str | None


def read_result(
    mode: str,
    events: list[EventRecord],
    stored: Any,
    final_text: str,
    attempts_used_up: bool = False,
) -> ResultReading:
    """From this run's submit_result answers, else from a result block in the final text.

    A last submission whose arguments were not JSON reads as cut off (`unstructured`),
    unless it used up the model's tries: then the model was shown the error and still
    failed, which is `malformed` like any other rejection.
    """
    submissions = [
        ev.payload
        for ev in events
        if ev.kind == "tool_result" and ev.payload.get("name") == "submit_result"
    ]
    if any(p.get("accepted") for p in submissions) and isinstance(stored, dict):
        return ResultReading("parsed", stored, None)
    if submissions:
        last = submissions[-1].get("error") or "the result was rejected"
        if last.startswith("arguments are not valid JSON") and not attempts_used_up:
            return ResultReading(
                "unstructured", None, f"result: the submission was cut off: {last}"
            )
        return ResultReading("malformed", None, last)
    block = read_block(final_text, mode)
    if block.state == "unavailable":
        return ResultReading(
            "unavailable",
            None,
            "result: nothing was submitted (submit_result was never called and the final "
            "text holds no result block)",
        )
    return ResultReading(block.state, block.result, block.error)


def sentence(text: str | None) -> str | None:
    """A one-line error as a sentence."""
    if not text:
        return text
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


@dataclass
class RunFacts:
    """Everything a verdict is built from, gathered by the runner after the run."""

    run_id: str
    session_id: str
    provider: str
    model: str
    mode: str
    step_cap: int
    duration_s: float
    events: list[EventRecord]
    usage: UsageTotals
    stored_result: Any = None
    reason: str | None = None
    failed: bool = False
    timed_out: bool = False
    idle_timed_out: bool = False
    interrupted: bool = False
    artifacts: list[str] = field(default_factory=list)
    diagnostics: str = ""
    workdir: str | None = None
    log_path: str | None = None
    events_path: str | None = None
    final_text_path: str | None = None
    timeout_exit_code: int = EXIT_NOT_COMPLETED


def final_text_of(events: list[EventRecord]) -> str:
    """The model's last non-empty text in these events."""
    for ev in reversed(events):
        if ev.kind == "assistant" and ev.payload.get("text"):
            return str(ev.payload["text"])
    return ""


def end_reason(events: list[EventRecord]) -> tuple[str | None, bool]:
    """The reason of the run's last status event, and whether it was a failure."""
    for ev in reversed(events):
        if ev.kind == "status" and ev.payload.get("reason"):
            status = ev.payload.get("status")
            reason = str(ev.payload["reason"])
            return reason, status in ("failed", "cancelled") or reason in FAILURE_REASONS
    return None, False


def tool_error_counts(events: list[EventRecord]) -> ToolErrors:
    """Failed tool calls of the run; rejected result submissions are parse errors instead."""
    counts = ToolErrors()
    for ev in events:
        if ev.kind != "tool_result" or ev.payload.get("name") == "submit_result":
            continue
        if ev.payload.get("permission_denied"):
            counts.permission_denied += 1
        elif ev.payload.get("is_error"):
            counts.other += 1
    return counts


def build_verdict(facts: RunFacts) -> Verdict:
    """Classify the run and fill every field."""
    final_text = final_text_of(facts.events)
    session_reason, session_failed = end_reason(facts.events)
    reason = facts.reason or session_reason
    failed = facts.failed or session_failed
    reading = read_result(
        facts.mode,
        facts.events,
        facts.stored_result,
        final_text,
        attempts_used_up=session_reason == RESULT_ATTEMPTS_USED_UP,
    )
    verdict = classify(
        reason=reason,
        parse_state=reading.state,
        failed=failed,
        timed_out=facts.timed_out,
        idle_timed_out=facts.idle_timed_out,
        interrupted=facts.interrupted,
        final_text=final_text,
    )
    if verdict == "completed":
        exit_code = EXIT_COMPLETED
    elif facts.timed_out or facts.idle_timed_out:
        exit_code = facts.timeout_exit_code
    else:
        exit_code = EXIT_NOT_COMPLETED
    tail = facts.diagnostics.encode()[-STDERR_TAIL_BYTES:].decode(errors="ignore")
    usage = facts.usage
    return Verdict(
        run_id=facts.run_id,
        session_id=facts.session_id,
        provider=facts.provider,
        model=facts.model,
        mode=facts.mode,
        verdict=verdict,
        exit_code=exit_code,
        timed_out=facts.timed_out,
        idle_timed_out=facts.idle_timed_out,
        interrupted=facts.interrupted,
        steps=sum(1 for ev in facts.events if ev.kind == "assistant"),
        step_cap=facts.step_cap,
        duration_s=round(facts.duration_s, 3),
        tokens=Tokens(**usage.tokens()),
        cost_usd=usage.cost_usd,
        tool_errors=tool_error_counts(facts.events),
        parse_state=reading.state,
        parse_error=None if reading.state == "parsed" else sentence(reading.error),
        result=reading.result if reading.state == "parsed" else None,
        final_text_path=facts.final_text_path,
        artifacts=facts.artifacts,
        stderr_tail=tail if verdict in TAILED_VERDICTS else None,
        reason=reason,
        workdir=facts.workdir,
        log_path=facts.log_path,
        events_path=facts.events_path,
    )


def write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner only (0600), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def write_final_text(path: Path, events: list[EventRecord]) -> None:
    """The model's last text, or the line `no model output`; the file always exists."""
    text = final_text_of(events)
    write_private(path, text if text else NO_MODEL_OUTPUT + "\n")


def write_verdict_file(path: Path, verdict: Verdict) -> None:
    """The verdict beside the run's log, 0600."""
    write_private(path, json.dumps(verdict.model_dump(), ensure_ascii=False, indent=2) + "\n")


def error_line(message: str, hint: str) -> str:
    """The one stdout line of a dispatch that could not produce a verdict."""
    return json.dumps(
        {"type": ERROR_TYPE, "schema_version": SCHEMA_VERSION, "error": message, "hint": hint}
    )
