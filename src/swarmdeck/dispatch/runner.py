"""One dispatched run of a checked Plan: a session with the mode's prompt and tools, a
watched run with wall-clock and idle timeouts and signal handling, then the verdict."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from swarmdeck.catalog.records import EventRecord
from swarmdeck.config import Settings
from swarmdeck.dispatch.plan import WORKTREES_DIR, Plan
from swarmdeck.dispatch.runlog import RunLog
from swarmdeck.dispatch.schemas import VALIDATORS
from swarmdeck.dispatch.verdict import (
    RunFacts,
    Started,
    Verdict,
    build_verdict,
    write_final_text,
    write_verdict_file,
)
from swarmdeck.tools.sandbox import sandbox_in_force, sandbox_warning
from swarmdeck.workspace.rundir import RunDir

POLL_S = 0.05
HEARTBEAT_S = 30.0
CANCEL_WAIT_S = 10.0
TITLE_CHARS = 80


@dataclass
class RunPaths:
    """Where one run's files go: beside the session's run directory."""

    run_id: str
    dir: Path

    @property
    def log(self) -> Path:
        """Human-readable progress and warnings."""
        return self.dir / "run.log"

    @property
    def events(self) -> Path:
        """One JSON object per transcript event."""
        return self.dir / "events.jsonl"

    @property
    def final_text(self) -> Path:
        """The model's last text."""
        return self.dir / "final.txt"

    @property
    def verdict(self) -> Path:
        """The verdict, 0600."""
        return self.dir / "verdict.json"


def _run_paths(settings: Settings, session_id: str, resume: bool) -> RunPaths:
    session_dir = RunDir.create(settings.runs_dir, session_id).path
    if not resume:
        return RunPaths(session_id, session_dir)
    n = 1
    while (session_dir / f"resume-{n}").exists():
        n += 1
    path = session_dir / f"resume-{n}"
    path.mkdir(mode=0o700)
    return RunPaths(f"{session_id}.r{n}", path)


@dataclass
class _End:
    """How following the run stopped."""

    kind: str | None = None  # None (ended by itself), timeout, idle_timeout, interrupted
    crash: str | None = None
    signal: int | None = None


class Runner:
    """Carries out one Plan; the callbacks receive the started line and the verdict."""

    def __init__(
        self,
        plan: Plan,
        on_started: Callable[[Started], None],
        on_verdict: Callable[[Verdict], None],
    ) -> None:
        self.plan = plan
        self.on_started = on_started
        self.on_verdict = on_verdict
        self.stop = asyncio.Event()
        self._signal: int | None = None
        self._sandbox: str | None = None

    def run(self) -> Verdict:
        """Run to a verdict (handed to on_verdict before the engine shuts down)."""
        from swarmdeck.runtime.host import Host, SessionRequest, new_session_id

        plan = self.plan
        started_at = time.monotonic()
        workdir = plan.workdir
        session_id = plan.resume.id if plan.resume else new_session_id()
        host = Host(plan.settings)
        host.services.result_validators.update(VALIDATORS)
        if plan.opts.worktree:
            from swarmdeck.workspace.worktrees import create_worktree, save_meta

            tree = create_worktree(workdir, plan.settings.home / WORKTREES_DIR, plan.spec.name)
            save_meta(plan.settings.home / WORKTREES_DIR, _with_session(tree, session_id))
            workdir = Path(tree.workdir)
        prompt = plan.spec.prompt(str(workdir), plan.step_cap)
        sandbox = sandbox_in_force(plan.no_sandbox)
        cursor = 0
        if plan.resume is None:
            host.create_session(
                SessionRequest(
                    task=plan.task,
                    model=plan.model_ref,
                    workdir=workdir,
                    mode=plan.spec.session_mode,
                    title=_title(plan.task),
                    system_message=prompt,
                    tool_names=list(plan.spec.tools),
                    options={
                        "max_turns": plan.step_cap,
                        "result_schema": plan.spec.name,
                        "one_shot": True,
                        "no_sandbox": plan.opts.no_sandbox,
                        **plan.limit_options(),
                    },
                    session_id=session_id,
                )
            )
        else:
            cursor = self._prepare_resume(host, prompt)
        paths = _run_paths(plan.settings, session_id, plan.resume is not None)
        log = RunLog(paths.log, paths.events, to_stderr=plan.opts.progress)
        started = Started(
            run_id=paths.run_id,
            session_id=session_id,
            provider=plan.provider.key,
            model=plan.model_ref,
            mode=plan.spec.name,
            workdir=str(workdir),
            timeout_s=plan.timeout_s,
            idle_timeout_s=plan.idle_timeout_s,
            log_path=str(paths.log),
            events_path=str(paths.events),
            sandbox=sandbox.kind,
        )
        self.on_started(started)
        log.note(f"started {paths.run_id}: {plan.spec.name} on {plan.model_ref} in {workdir}")
        if not sandbox.available:
            warning = sandbox_warning(plan.spec.read_only, sandbox.reason, plan.no_sandbox)
            log.note(warning)
            if not plan.opts.progress:  # note() printed it already otherwise
                print(f"swarmdeck: {warning}", file=sys.stderr)
        self._sandbox = sandbox.kind
        try:
            return asyncio.run(self._run(host, session_id, cursor, paths, log, started_at))
        finally:
            log.close()
            try:
                host.shutdown()
            except Exception as exc:  # the verdict is out; a messy shutdown must not hide it
                print(f"swarmdeck: warning: engine shutdown: {exc}", file=sys.stderr)

    def _prepare_resume(self, host: Any, prompt: str) -> int:
        """Raise the step cap for this run and switch the prompt; the cursor before the run."""
        record = self.plan.resume
        assert record is not None
        events = host.catalog.events(record.id)
        turns = sum(1 for ev in events if ev.kind == "assistant")
        # The runtime counts turns and spending over the whole session; this run gets a
        # fresh allowance of each limit it sets.
        options = {
            **record.options,
            "max_turns": turns + self.plan.step_cap,
            "no_sandbox": self.plan.opts.no_sandbox,
        }
        if self.plan.budget:
            used = host.catalog.usage_totals([record.id])
            spent = {"max_tokens": used.input + used.output, "max_cost": used.cost_usd or 0.0}
            budget = {k: spent[k] + v for k, v in self.plan.budget.items()}
            options["budget"] = {**(record.options.get("budget") or {}), **budget}
        if self.plan.max_children is not None:
            options["max_children"] = self.plan.max_children
        host.catalog.update_session(record.id, options=options, system_message=prompt)
        return max((ev.id for ev in events), default=0)

    async def _run(
        self, host: Any, sid: str, cursor: int, paths: RunPaths, log: RunLog, started_at: float
    ) -> Verdict:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            end = _End()
            seen: list[EventRecord] = []
            try:
                if self.plan.resume is None:
                    await host.start(sid)
                else:
                    pending = host.continue_session(sid, self.plan.task)
                    if inspect.isawaitable(pending):
                        await pending
                end = await self._follow(host, sid, cursor, log, seen)
            except Exception as exc:  # the verdict must still be printed
                end = _End(crash=f"{type(exc).__name__}: {exc}")
                log.note(f"error: the run failed: {end.crash}")
            if end.kind is not None:
                log.note(f"{end.kind.replace('_', ' ')}: stopping the session")
                why = end.kind.replace("_", " ")
                await stop_session(host, sid, f"{why}: stopped by swarmdeck")
            events = await asyncio.to_thread(host.catalog.events, sid, after_id=cursor)
            logged = {ev.id for ev in seen}
            for ev in events:
                if ev.id not in logged:  # what the cancel wrote, after following stopped
                    log.event(ev)
            verdict = self._verdict(host, sid, cursor, events, end, paths, log, started_at)
            self.on_verdict(verdict)
            log.note(f"verdict {verdict.verdict} ({verdict.reason}) · {paths.verdict}")
            return verdict
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: int) -> None:
        if self.stop.is_set():
            # A second signal: the user means it; leave at once.
            raise KeyboardInterrupt
        self._signal = sig
        self.stop.set()

    async def _follow(
        self, host: Any, sid: str, cursor: int, log: RunLog, seen: list[EventRecord]
    ) -> _End:
        """Print events until the run ends by itself, a timeout fires, or a signal comes."""
        plan = self.plan
        outcome = asyncio.ensure_future(host.wait(sid))
        stopped = asyncio.ensure_future(self.stop.wait())
        waiters = {outcome, stopped}
        start = last_event = last_beat = time.monotonic()
        ended = False
        try:
            while True:
                done = ended or outcome.done()
                batch = await asyncio.to_thread(host.catalog.events, sid, after_id=cursor)
                now = time.monotonic()
                for ev in batch:
                    cursor = max(cursor, ev.id)
                    last_event = now
                    seen.append(ev)
                    log.event(ev)
                    if ev.kind == "status" and ev.payload.get("reason"):
                        ended = True
                if (done or ended) and not batch:
                    exc = outcome.exception() if outcome.done() else None
                    if exc is not None:
                        return _End(crash=f"{type(exc).__name__}: {exc}")
                    if not ended:  # the workflow stopped without recording how it ended
                        result = outcome.result() if outcome.done() else None
                        return _End(crash=f"the session stopped without finishing ({result})")
                    return _End()
                if self.stop.is_set():
                    return _End("interrupted", signal=self._signal)
                if plan.timeout_s and now - start >= plan.timeout_s:
                    return _End("timeout")
                if plan.idle_timeout_s and now - last_event >= plan.idle_timeout_s:
                    last_event = await _last_sign_of_life(host, sid, last_event, now)
                    if now - last_event >= plan.idle_timeout_s:
                        return _End("idle_timeout")
                if now - last_beat >= HEARTBEAT_S and now - last_event >= HEARTBEAT_S:
                    last_beat = now
                    log.note(
                        f"… still running: {sum(1 for e in seen if e.kind == 'assistant')} "
                        f"turns, {now - start:.0f}s elapsed, {now - last_event:.0f}s since "
                        "the last event"
                    )
                if not batch:
                    await asyncio.wait(waiters, timeout=POLL_S)
        finally:
            stopped.cancel()
            if not outcome.done():
                outcome.cancel()

    def _verdict(
        self,
        host: Any,
        sid: str,
        cursor: int,
        events: list[EventRecord],
        end: _End,
        paths: RunPaths,
        log: RunLog,
        started_at: float,
    ) -> Verdict:
        plan = self.plan
        run_start_ts = events[0].ts if events else time.time()
        record = host.catalog.get_session(sid)
        usage = host.catalog.usage_totals([sid], since=run_start_ts if cursor else None)
        write_final_text(paths.final_text, events)
        reason = {"timeout": "timeout", "idle_timeout": "idle_timeout"}.get(end.kind or "")
        if end.kind == "interrupted":
            reason = "interrupted"
        if end.crash:
            reason = "crashed"
        facts = RunFacts(
            run_id=paths.run_id,
            session_id=sid,
            provider=plan.provider.key,
            model=plan.model_ref,
            mode=plan.spec.name,
            step_cap=plan.step_cap,
            duration_s=time.monotonic() - started_at,
            events=events,
            usage=usage,
            stored_result=record.result,
            reason=reason,
            failed=bool(end.crash),
            timed_out=end.kind == "timeout",
            idle_timed_out=end.kind == "idle_timeout",
            interrupted=end.kind == "interrupted",
            artifacts=artifact_links(host, sid, run_start_ts if cursor else None),
            diagnostics=plan.redactor.redact(log.tail()),
            workdir=record.workdir,
            log_path=str(paths.log),
            events_path=str(paths.events),
            final_text_path=str(paths.final_text),
            timeout_exit_code=plan.opts.timeout_exit_code,
        )
        verdict = build_verdict(facts).model_copy(update={"sandbox": self._sandbox})
        write_verdict_file(paths.verdict, verdict)
        return verdict


async def stop_session(host: Any, session_id: str, why: str) -> None:
    """Stop a session whose run is given up; what was done stays in the catalog, resumable."""
    # Cancelled steps make the engine log warnings; the caller says what happened.
    logging.getLogger("dbos").setLevel(logging.ERROR)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(host.cancel(session_id, why), CANCEL_WAIT_S)


async def _last_sign_of_life(host: Any, sid: str, last_event: float, now: float) -> float:
    """When the session last showed it works (monotonic clock): its last event, or, if
    later, its last activity touch (a model streaming a long answer touches the session
    while no event comes; the session may run in another process, so this is read from
    the catalog)."""
    record = await asyncio.to_thread(host.catalog.get_session, sid)
    if record.active_at is None:
        return last_event
    return max(last_event, now - max(0.0, time.time() - record.active_at))


def _title(task: str) -> str:
    first = next((line.strip("# ").strip() for line in task.splitlines() if line.strip()), "")
    return first[:TITLE_CHARS]


def _with_session(tree: Any, session_id: str) -> Any:
    from dataclasses import replace

    return replace(tree, session_id=session_id)


def artifact_links(host: Any, sid: str, since: float | None) -> list[str]:
    """`artifact://session/name` links of the artifacts this run wrote."""
    from swarmdeck.catalog import schema

    query = sa.select(schema.artifacts.c.name).where(schema.artifacts.c.session_id == sid)
    if since is not None:
        query = query.where(schema.artifacts.c.ts >= since)
    with host.catalog.engine.connect() as conn:
        names = [row[0] for row in conn.execute(query.order_by(schema.artifacts.c.ts))]
    return [f"artifact://{sid}/{name}" for name in names]
