"""One dispatched run of a checked Plan: a session with the mode's prompt and tools, a
watched run with wall-clock and idle timeouts and signal handling, then the verdict."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarmdeck.catalog.ids import new_session_id
from swarmdeck.catalog.records import EventRecord
from swarmdeck.config import Settings
from swarmdeck.dispatch.drivers import LocalDriver, NewSession, Source, fleet_driver
from swarmdeck.dispatch.plan import WORKTREES_DIR, Plan
from swarmdeck.tools.sandbox_info import SandboxInfo, sandbox_warning
from swarmdeck.workspace.rundir import RunDir

if TYPE_CHECKING:
    # The fleet path hands its session over before it needs these (drivers.WARM_MODULES).
    from swarmdeck.dispatch.interrupts import Interrupts
    from swarmdeck.dispatch.runlog import RunLog
    from swarmdeck.dispatch.verdict import Started, Verdict

POLL_S = 0.02
HEARTBEAT_S = 30.0
TITLE_CHARS = 80


@dataclass
class RunPaths:
    """Where one run's files go: beside the session's run directory."""

    run_id: str
    dir: Path
    log: Path = field(init=False)  # human-readable progress and warnings
    events: Path = field(init=False)  # one JSON object per transcript event
    final_text: Path = field(init=False)  # the model's last text
    verdict: Path = field(init=False)  # the verdict, 0600

    def __post_init__(self) -> None:
        self.log = self.dir / "run.log"
        self.events = self.dir / "events.jsonl"
        self.final_text = self.dir / "final.txt"
        self.verdict = self.dir / "verdict.json"


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
        # The signals received while following (made on the run's loop, by _run).
        self.interrupts: Interrupts | None = None

    def run(self) -> Verdict:
        """Run to a verdict (handed to on_verdict before the engine shuts down): on the
        fleet when a worker serves the store (unless --local), else in this process."""
        plan = self.plan
        started_at = time.monotonic()
        workdir = plan.workdir
        session_id = plan.resume.id if plan.resume else new_session_id()
        # A resume continues a session in place (its workflow, its generation): here.
        here = plan.opts.local or plan.resume is not None
        fleet = None if here else fleet_driver(plan.settings, plan.redactor.redact)
        if fleet is None and plan.external:
            # It runs here: refuse now, before anything is stored, if the runner is not.
            from swarmdeck.runners.install import require_installed

            require_installed(plan.settings.home, plan.runner)
        driver = fleet or LocalDriver(plan.settings)
        if plan.opts.worktree:
            workdir = self._worktree(session_id)
        cursor = 0
        if plan.resume is None:
            driver.create(self._new_session(session_id, workdir))
        else:
            prompt = plan.spec.prompt(str(workdir), plan.step_cap, plan.external)
            cursor = self._prepare_resume(driver, prompt)
        paths = _run_paths(plan.settings, session_id, plan.resume is not None)
        import asyncio

        from swarmdeck.dispatch.runlog import RunLog

        log = RunLog(paths.log, paths.events, to_stderr=plan.opts.progress)
        sandbox = driver.sandbox(plan.opts.no_sandbox)
        started = self._started(paths, session_id, workdir, sandbox)
        self.on_started(started)
        where = "handed to the fleet" if fleet else "in this process"
        log.note(
            f"started {paths.run_id}: {plan.spec.name} on {plan.model_ref} in {workdir} ({where})"
        )
        self._warn_unconfined(sandbox, log)
        try:
            return asyncio.run(self._run(driver, session_id, cursor, paths, log, started_at))
        finally:
            log.close()
            try:
                driver.shutdown()
            except Exception as exc:  # the verdict is out; a messy shutdown must not hide it
                print(f"swarmdeck: warning: engine shutdown: {exc}", file=sys.stderr)

    def _worktree(self, session_id: str) -> Path:
        """A fresh worktree of the workdir for this session; its path."""
        from swarmdeck.workspace.worktrees import create_worktree, save_meta

        plan = self.plan
        tree = create_worktree(plan.workdir, plan.settings.home / WORKTREES_DIR, plan.spec.name)
        save_meta(plan.settings.home / WORKTREES_DIR, _with_session(tree, session_id))
        return Path(tree.workdir)

    def _new_session(self, session_id: str, workdir: Path) -> NewSession:
        """The session a new run creates: the mode's prompt and tools, the run's limits."""
        plan = self.plan
        return NewSession(
            session_id=session_id,
            task=plan.task,
            model=plan.model_ref,
            workdir=workdir,
            mode=plan.spec.session_mode,
            title=_title(plan.task),
            system_message=plan.spec.prompt(str(workdir), plan.step_cap, plan.external),
            tool_names=[] if plan.external else list(plan.spec.tools),
            options={
                **plan.runner_options(),
                "max_turns": plan.step_cap,
                "result_schema": plan.spec.name,
                "one_shot": True,
                # Only the flag travels: where the session runs, that home's settings.yaml
                # decides the rest (the sandbox the started line names is that one).
                "no_sandbox": plan.opts.no_sandbox,
                **({"workspace": plan.opts.workspace} if plan.opts.workspace else {}),
                **plan.limit_options(),
            },
        )

    def _started(
        self, paths: RunPaths, session_id: str, workdir: Path, sandbox: SandboxInfo | None
    ) -> Started:
        plan = self.plan
        from swarmdeck.dispatch.verdict import Started

        return Started(
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
            sandbox=sandbox.kind if sandbox is not None else None,
        )

    def _warn_unconfined(self, sandbox: SandboxInfo | None, log: RunLog) -> None:
        """Say so when no sandbox will confine the session's tools."""
        if sandbox is None or sandbox.available:
            return
        warning = sandbox_warning(self.plan.spec.read_only, sandbox.reason, sandbox.opted_out)
        log.note(warning)
        if not self.plan.opts.progress:  # note() printed it already otherwise
            print(f"swarmdeck: {warning}", file=sys.stderr)

    def detach(self) -> Started:
        """Hand a new session to the fleet and return its started line, without waiting; a
        worker takes it as soon as one serves the store."""
        plan = self.plan
        driver = fleet_driver(plan.settings, plan.redactor.redact, require_workers=False)
        if driver is None or not driver.direct.has_catalog():
            # A fresh store: make the catalog the workers will serve.
            from swarmdeck.catalog.catalog import Catalog

            Catalog.open(plan.settings.store_url).engine.dispose()
            driver = fleet_driver(plan.settings, plan.redactor.redact, require_workers=False)
            assert driver is not None
        try:
            workdir, session_id = plan.workdir, new_session_id()
            if plan.opts.worktree:
                workdir = self._worktree(session_id)
            driver.create(self._new_session(session_id, workdir))
            if not driver.live_workers():
                print(
                    "swarmdeck: no worker serves the store now; the session waits for one "
                    "(`swarmdeck worker`)",
                    file=sys.stderr,
                )
            paths = _run_paths(plan.settings, session_id, False)
            # The worker that will run it is not known yet: named when the fleet agrees.
            sandbox = driver.sandbox(plan.opts.no_sandbox)
            started = self._started(paths, session_id, workdir, sandbox)
            self.on_started(started)
            return started
        finally:
            driver.shutdown()

    def _prepare_resume(self, driver: LocalDriver, prompt: str) -> int:
        """Raise the step cap for this run and switch the prompt; the cursor before the run."""
        record = self.plan.resume
        assert record is not None
        events = driver.source.events(record.id)
        turns = sum(1 for ev in events if ev.kind == "assistant")
        # The runtime counts turns and spending over the whole session; this run gets a
        # fresh allowance of each limit it sets.
        options = {
            **record.options,
            "max_turns": turns + self.plan.step_cap,
            "no_sandbox": self.plan.opts.no_sandbox,
        }
        if self.plan.budget:
            used = driver.source.usage_totals([record.id])
            spent = {"max_tokens": used.input + used.output, "max_cost": used.cost_usd or 0.0}
            budget = {k: spent[k] + v for k, v in self.plan.budget.items()}
            options["budget"] = {**(record.options.get("budget") or {}), **budget}
        if self.plan.max_children is not None:
            options["max_children"] = self.plan.max_children
        driver.resume(record, options, prompt)
        return max((ev.id for ev in events), default=0)

    async def _run(
        self, driver: Any, sid: str, cursor: int, paths: RunPaths, log: RunLog, started_at: float
    ) -> Verdict:
        from swarmdeck.dispatch.interrupts import watched_signals

        with watched_signals() as self.interrupts:
            return await self._run_to_verdict(driver, sid, cursor, paths, log, started_at)

    async def _run_to_verdict(
        self, driver: Any, sid: str, cursor: int, paths: RunPaths, log: RunLog, started_at: float
    ) -> Verdict:
        import asyncio

        try:
            end = _End()
            seen: list[EventRecord] = []
            try:
                await driver.start(sid, self.plan.task if self.plan.resume else None)
                end = await self._follow(driver, sid, cursor, log, seen)
            except Exception as exc:  # the verdict must still be printed
                end = _End(crash=f"{type(exc).__name__}: {exc}")
                log.note(f"error: the run failed: {end.crash}")
            if end.kind is not None:
                log.note(f"{end.kind.replace('_', ' ')}: stopping the session")
                await driver.stop(sid, f"{end.kind.replace('_', ' ')}: stopped by swarmdeck")
            source: Source = driver.source
            events = await asyncio.to_thread(source.events, sid, after_id=cursor)
            logged = {ev.id for ev in seen}
            for ev in events:
                if ev.id not in logged:  # what the cancel wrote, after following stopped
                    log.event(ev)
            verdict = self._verdict(driver, sid, cursor, events, end, paths, log, started_at)
            self.on_verdict(verdict)
            log.note(f"verdict {verdict.verdict} ({verdict.reason}) · {paths.verdict}")
            return verdict
        finally:
            # After the verdict: the pools must close on this loop, before it ends, or
            # aiohttp reports them unclosed on stderr; the MCP servers stop with the run.
            await driver.close_on_loop()

    async def _follow(
        self, driver: Any, sid: str, cursor: int, log: RunLog, seen: list[EventRecord]
    ) -> _End:
        """Print events until the run ends by itself, a timeout fires, or a signal comes."""
        import asyncio

        plan = self.plan
        interrupts = self.interrupts
        assert interrupts is not None
        stopped = asyncio.ensure_future(interrupts.stop.wait())
        start = last_event = last_beat = time.monotonic()
        ended = False
        try:
            while True:
                outcome = driver.outcome  # None while the session runs elsewhere
                done = ended or (outcome is not None and outcome.done())
                batch = await asyncio.to_thread(driver.source.events, sid, after_id=cursor)
                now = time.monotonic()
                for ev in batch:
                    cursor = max(cursor, ev.id)
                    last_event = now
                    seen.append(ev)
                    log.event(ev)
                    if ev.kind == "status" and ev.payload.get("reason"):
                        ended = True
                if (done or ended) and not batch:
                    exc = outcome.exception() if outcome is not None and outcome.done() else None
                    if exc is not None:
                        return _End(crash=f"{type(exc).__name__}: {exc}")
                    if not ended:  # the workflow stopped without recording how it ended
                        result = outcome.result() if outcome is not None else None
                        return _End(crash=f"the session stopped without finishing ({result})")
                    return _End()
                if interrupts.stop.is_set():
                    return _End("interrupted", signal=interrupts.signal)
                if plan.timeout_s and now - start >= plan.timeout_s:
                    return _End("timeout")
                if plan.idle_timeout_s and now - last_event >= plan.idle_timeout_s:
                    last_event = await _last_sign_of_life(driver.source, sid, last_event, now)
                    if now - last_event >= plan.idle_timeout_s:
                        return _End("idle_timeout")
                if now - last_beat >= HEARTBEAT_S and now - last_event >= HEARTBEAT_S:
                    last_beat = now
                    log.note(
                        f"… still running: {sum(1 for e in seen if e.kind == 'assistant')} "
                        f"turns, {now - start:.0f}s elapsed, {now - last_event:.0f}s since "
                        "the last event"
                    )
                await driver.watch(sid)
                if not batch:
                    waiters = {stopped, *([outcome] if outcome is not None else [])}
                    await asyncio.wait(waiters, timeout=POLL_S)
        finally:
            stopped.cancel()
            outcome = driver.outcome
            if outcome is not None and not outcome.done():
                outcome.cancel()

    def _verdict(
        self,
        driver: Any,
        sid: str,
        cursor: int,
        events: list[EventRecord],
        end: _End,
        paths: RunPaths,
        log: RunLog,
        started_at: float,
    ) -> Verdict:
        plan = self.plan
        source: Source = driver.source
        run_start_ts = events[0].ts if events else time.time()
        record = source.get_session(sid)
        usage = source.usage_totals([sid], since=run_start_ts if cursor else None)
        from swarmdeck.dispatch.verdict import (
            EXIT_NOT_COMPLETED,
            RunFacts,
            build_verdict,
            write_final_text,
            write_verdict_file,
        )

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
            artifacts=[
                f"artifact://{sid}/{name}"
                for name in source.artifact_names(sid, run_start_ts if cursor else None)
            ],
            diagnostics=plan.redactor.redact(log.tail()),
            workdir=record.workdir,
            log_path=str(paths.log),
            events_path=str(paths.events),
            final_text_path=str(paths.final_text),
            timeout_exit_code=(
                EXIT_NOT_COMPLETED
                if plan.opts.timeout_exit_code is None
                else plan.opts.timeout_exit_code
            ),
        )
        sandbox = driver.sandbox_of_run(sid, plan.opts.no_sandbox)
        verdict = build_verdict(facts).model_copy(
            update={
                "sandbox": sandbox.kind if sandbox is not None else None,
                "delivered": self._deliver(record, source, paths, log),
            }
        )
        write_verdict_file(paths.verdict, verdict)
        return verdict

    def _deliver(self, record: Any, source: Any, paths: RunPaths, log: RunLog) -> Any:
        """A store workspace's changes, brought back here (dispatch/delivery.py)."""
        from swarmdeck.dispatch.delivery import deliver
        from swarmdeck.errors import SwarmdeckError

        try:
            delivered = deliver(
                record,
                source,
                self.plan.settings,
                paths.run_id,
                self.plan.opts.deliver,
                paths.dir / "changes.patch",
            )
        except SwarmdeckError as exc:
            log.note(f"error: the workspace's changes were not delivered: {exc.one_line()}")
            return None
        if delivered is not None and delivered.branch:
            log.note(f"delivered: branch {delivered.branch} in {delivered.repo}")
        elif delivered is not None and delivered.patch_path:
            log.note(f"delivered: patch {delivered.patch_path}")
        return delivered


async def _last_sign_of_life(source: Source, sid: str, last_event: float, now: float) -> float:
    """When the session last showed it works (monotonic clock): its last event, or, if
    later, its last activity touch (a model streaming a long answer touches the session
    while no event comes; the session may run in another process, so this is read from
    the catalog)."""
    import asyncio

    record = await asyncio.to_thread(source.get_session, sid)
    if record.active_at is None:
        return last_event
    return max(last_event, now - max(0.0, time.time() - record.active_at))


def _title(task: str) -> str:
    first = next((line.strip("# ").strip() for line in task.splitlines() if line.strip()), "")
    return first[:TITLE_CHARS]


def _with_session(tree: Any, session_id: str) -> Any:
    from dataclasses import replace

    return replace(tree, session_id=session_id)
