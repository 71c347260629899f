"""Fanout: several jobs at once, each a separate `swarmdeck dispatch` process, so a worker
that dies still leaves a (synthesized) verdict in the array."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from swarmdeck.config import Settings, load_settings
from swarmdeck.dispatch import guards
from swarmdeck.dispatch.modes import MODES, get_mode
from swarmdeck.dispatch.settings import load_dispatch_settings
from swarmdeck.dispatch.verdict import (
    ERROR_TYPE,
    STARTED_TYPE,
    STDERR_TAIL_BYTES,
    VERDICT_TYPE,
    Verdict,
)
from swarmdeck.errors import StoreError, TaskRefusedError, UsageError
from swarmdeck.models.registry import ProviderRegistry
from swarmdeck.secrets.redact import Redactor, load_redactor
from swarmdeck.secrets.store import CredentialStore

# A worker gets this long past its own timeout to print its verdict before it is killed.
GRACE_S = 60.0
TERM_WAIT_S = 20.0
# A verdict with a long result is one long line.
LINE_LIMIT = 64 * 1024 * 1024


class Job(BaseModel):
    """One job of a fanout."""

    model_config = ConfigDict(extra="forbid")

    name: str
    provider: str = Field(min_length=1)
    mode: str
    task_file: Path | None = None
    task: str | None = None
    workdir: Path | None = None
    worktree: bool = False
    timeout_s: float | None = Field(default=None, ge=0, alias="timeout")
    idle_timeout_s: float | None = Field(default=None, ge=0, alias="idle_timeout")
    # `max_steps` is the old name of `max_turns`, still read.
    max_turns: int | None = Field(
        default=None, ge=1, validation_alias=AliasChoices("max_turns", "max_steps")
    )
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost: float | None = Field(default=None, gt=0)
    session: str | None = None
    # Only a writing job may run its shell without a sandbox (as with dispatch).
    no_sandbox: bool = False


def parse_job_spec(spec: str) -> tuple[str, str, str]:
    """`PROVIDER[:MODEL]:MODE:FILE` into its parts (the mode is the first mode name found)."""
    parts = spec.split(":")
    for i in range(1, len(parts) - 1):
        if parts[i] in MODES:
            return ":".join(parts[:i]), parts[i], ":".join(parts[i + 1 :])
    raise UsageError(
        f"bad --job {spec!r}: expected PROVIDER:MODE:TASK_FILE",
        f"MODE is one of {', '.join(MODES)}",
    )


def load_jobs(
    specs: list[str],
    jobs_file: Path | None,
    *,
    workdir: Path | None,
    worktree: bool,
    timeout_s: float | None,
    idle_timeout_s: float | None,
    no_sandbox: bool = False,
    settings: Settings | None = None,
) -> list[Job]:
    """Every job from --job and --jobs-file, checked before any of them runs.

    `no_sandbox` (fanout's --no-sandbox) reaches the jobs that write; read-only jobs keep
    their sandbox (they have no shell without one), so the flag is not an error for them."""
    defaults: dict[str, Any] = {"workdir": workdir, "worktree": worktree}
    if timeout_s is not None:
        defaults["timeout"] = timeout_s
    if idle_timeout_s is not None:
        defaults["idle_timeout"] = idle_timeout_s
    raw: list[dict[str, Any]] = []
    for spec in specs:
        provider, mode, file = parse_job_spec(spec)
        raw.append({"name": spec, "provider": provider, "mode": mode, "task_file": file})
    if jobs_file is not None:
        raw.extend(_read_jobs_file(jobs_file, defaults))
    if defaults.get("workdir") is None:  # like dispatch run from here
        defaults["workdir"] = Path.cwd()
    if not raw:
        raise UsageError("no jobs", "pass --job PROVIDER:MODE:TASK_FILE or --jobs-file FILE")
    jobs = []
    for i, entry in enumerate(raw):
        merged = {**defaults, **{k: v for k, v in entry.items() if v is not None}}
        merged.setdefault("name", f"job-{i + 1}")
        try:
            job = Job.model_validate(merged)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UsageError(
                f"job {merged['name']}: {where}: {first['msg']}", "fix the job"
            ) from None
        if no_sandbox and get_mode(job.mode).writes:
            job.no_sandbox = True
        jobs.append(job)
    check_jobs(jobs, settings or load_settings())
    return jobs


def _read_jobs_file(path: Path, defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """`jobs:` (a list of job mappings) and optional `defaults:` from a YAML file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"jobs file not found: {path}", "check the path") from None
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(
            f"cannot read jobs file {path}: {' '.join(str(exc).split())}", "fix the file"
        ) from None
    if isinstance(data, list):
        data = {"jobs": data}
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise UsageError(
            f"{path}: expected a mapping with a list under 'jobs'",
            "the format is in docs/fanout.md of swarmdeck",
        )
    file_defaults = data.get("defaults") or {}
    if not isinstance(file_defaults, dict):
        raise UsageError(f"{path}: 'defaults' must be a mapping", "fix the file")
    for key, value in file_defaults.items():
        if defaults.get(key) in (None, False):
            defaults[key] = value
    entries = []
    base = path.parent
    for i, entry in enumerate(data["jobs"]):
        if not isinstance(entry, dict):
            raise UsageError(f"{path}: jobs[{i}] must be a mapping", "fix the file")
        entry = dict(entry)
        for key in ("task_file", "workdir"):
            if entry.get(key) is not None:  # relative to the jobs file, like an include
                entry[key] = base / Path(str(entry[key])).expanduser()
        entries.append(entry)
    if isinstance(defaults.get("workdir"), str):
        defaults["workdir"] = base / Path(defaults["workdir"]).expanduser()
    return entries


def check_jobs(jobs: list[Job], settings: Settings) -> None:
    """Refuse a bad job set before anything runs: cheap checks, no engine, no model."""
    registry = ProviderRegistry.load(settings.providers_dir)
    redactor: Redactor = load_redactor(CredentialStore(settings.credentials_dir))
    for job in jobs:
        spec = get_mode(job.mode)
        registry.resolve(job.provider)
        if spec.name == "resume" and not job.session:
            raise UsageError(f"job {job.name}: resume needs a session", "set `session:` in the job")
        if job.no_sandbox and spec.read_only:
            raise UsageError(
                f"job {job.name}: no_sandbox does not apply to {spec.name} mode",
                "a read-only mode runs the shell only inside a sandbox; drop no_sandbox",
            )
        if job.workdir is None and spec.name != "resume":
            raise UsageError(
                f"job {job.name}: no workdir", "pass --workdir or set workdir in the job"
            )
        if job.workdir is not None and not job.workdir.is_dir():
            raise UsageError(
                f"job {job.name}: workdir does not exist: {job.workdir}", "fix the job"
            )
        try:
            task = guards.read_task(job.task, job.task_file)
            guards.check_task_text(task, redactor)
            guards.check_worktree_use(spec, job.worktree and spec.writes)
        except (UsageError, TaskRefusedError) as exc:
            raise type(exc)(f"job {job.name}: {exc.message}", exc.hint) from None
    shared: dict[Path, list[Job]] = defaultdict(list)
    for job in jobs:
        if job.mode == "code" and job.workdir is not None:
            shared[job.workdir.resolve()].append(job)
    for workdir, group in shared.items():
        if len(group) > 1 and not all(j.worktree for j in group):
            names = ", ".join(j.name for j in group)
            raise UsageError(
                f"{len(group)} code jobs would write to {workdir} at once ({names})",
                "give each its own worktree: --worktree, or `worktree: true` per job",
            )


def dispatch_argv(job: Job, task_file: Path) -> list[str]:
    """The `swarmdeck dispatch` command line of a job (the task always goes by file)."""
    argv = [sys.executable, "-m", "swarmdeck", "dispatch", "--provider", job.provider]
    argv += ["--mode", job.mode, "--task-file", str(task_file)]
    if job.workdir is not None and job.mode != "resume":  # resume runs in its session's own
        argv += ["--workdir", str(job.workdir)]
    if job.worktree and get_mode(job.mode).writes and job.mode != "resume":
        argv.append("--worktree")
    if job.timeout_s is not None:
        argv += ["--timeout", str(job.timeout_s)]
    if job.idle_timeout_s is not None:
        argv += ["--idle-timeout", str(job.idle_timeout_s)]
    for flag, value in (
        ("--max-turns", job.max_turns),
        ("--max-tokens", job.max_tokens),
        ("--max-cost", job.max_cost),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if job.session:
        argv += ["--session", job.session]
    if job.no_sandbox:
        argv.append("--no-sandbox")
    return argv


class Fanout:
    """Runs the jobs with at most `max_parallel` at once and each provider's concurrency."""

    def __init__(
        self,
        jobs: list[Job],
        max_parallel: int,
        settings: Settings,
        on_started: Callable[[int, dict[str, Any]], None] | None = None,
        hold_by_provider: bool = True,
    ) -> None:
        self.jobs = jobs
        self.settings = settings
        self.slots = asyncio.Semaphore(max_parallel)
        # Called with (job index, started line) as each job starts; by default the line is
        # echoed to stderr.
        self.on_started = on_started or _echo_started
        registry = ProviderRegistry.load(settings.providers_dir)
        # Without the hold, every job starts at once and the providers' shared limiter alone
        # spaces their model calls (a caller that needs every session id now).
        self.provider_slots = {
            key: asyncio.Semaphore(
                registry.resolve(key)[0].concurrency if hold_by_provider else len(jobs)
            )
            for key in {j.provider.split(":")[0] for j in jobs}
        }
        self.redactor = load_redactor(CredentialStore(settings.credentials_dir))
        dsettings = load_dispatch_settings(settings.home)
        self.default_timeout = dsettings.timeout_s
        self.dir = settings.runs_dir / f"fanout-{int(time.time() * 1000):x}-{os.getpid()}"
        try:
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the fanout directory {self.dir}: {exc.strerror or exc}",
                "the swarmdeck home (SWARMDECK_HOME) must be a writable directory",
            ) from None
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.interrupted = False

    async def run(self) -> list[dict[str, Any]]:
        """Every job's verdict, in job order."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal)
        try:
            return list(await asyncio.gather(*(self._job(i, j) for i, j in enumerate(self.jobs))))
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _on_signal(self) -> None:
        # Pass the interrupt on: each worker ends its run and prints an interrupted verdict.
        self.interrupted = True
        for proc in self.procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)

    async def run_job(self, index: int) -> dict[str, Any]:
        """One job's verdict (the caller runs the jobs it wants, in any order)."""
        return await self._job(index, self.jobs[index])

    async def _job(self, index: int, job: Job) -> dict[str, Any]:
        # The provider's slot first: waiting for it must not hold a slot another provider's
        # job could use.
        async with self.provider_slots[job.provider.split(":")[0]], self.slots:
            if self.interrupted:
                return self._synthesize(
                    job, None, "not started: the fanout was interrupted", None, ""
                )
            return await self._run_job(index, job)

    async def _run_job(self, index: int, job: Job) -> dict[str, Any]:
        task_file = job.task_file
        if task_file is None:  # inline task: never on argv, where `ps` would show it
            task_file = self.dir / f"job-{index + 1}.task.md"
            fd = os.open(task_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(job.task or "")
        stderr_path = self.dir / f"job-{index + 1}.stderr.log"
        with stderr_path.open("wb") as stderr:
            proc = await asyncio.create_subprocess_exec(
                *dispatch_argv(job, task_file),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                limit=LINE_LIMIT,
            )
            self.procs[index] = proc
            started, verdict, error, killed_for = await self._collect(index, job, proc)
        self.procs.pop(index, None)
        tail = self._tail(stderr_path)
        if verdict is not None:
            return {"job": job.name, **verdict}
        reason = killed_for or (error and f"no verdict: {error}")
        if reason is None:
            code = proc.returncode
            if code is not None and code < 0:
                name = signal.Signals(-code).name
                reason = f"the worker was killed by {name} before it printed a verdict"
            else:
                reason = f"the worker exited with code {code} without a verdict"
        return self._synthesize(job, started, reason, proc.returncode, tail)

    async def _collect(
        self, index: int, job: Job, proc: asyncio.subprocess.Process
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str | None, str | None]:
        """Read the worker's lines until it exits or overruns its time."""
        assert proc.stdout is not None
        started: dict[str, Any] | None = None
        verdict: dict[str, Any] | None = None
        error: str | None = None
        timeout = job.timeout_s if job.timeout_s is not None else self.default_timeout
        deadline = time.monotonic() + timeout + GRACE_S if timeout else None
        killed_for: str | None = None
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                raw = await asyncio.wait_for(proc.stdout.readline(), remaining)
            except TimeoutError:
                killed_for = f"the worker overran its {timeout:g}s timeout and was stopped"
                await self._stop(proc)
                break
            if not raw:
                break
            line = raw.decode("utf-8", errors="replace").strip()
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = doc.get("type") if isinstance(doc, dict) else None
            if kind == STARTED_TYPE:
                started = doc
                self.on_started(index, doc)
            elif kind == VERDICT_TYPE:
                verdict = doc
            elif kind == ERROR_TYPE:
                error = str(doc.get("error"))
        await proc.wait()
        if verdict is not None:
            sys.stderr.write(
                f"swarmdeck: job {job.name}: {verdict.get('verdict')} ({verdict.get('reason')})\n"
            )
        return started, verdict, error, killed_for

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), TERM_WAIT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    def _tail(self, path: Path) -> str:
        try:
            data = path.read_bytes()[-4096:]
        except OSError:
            return ""
        text = self.redactor.redact(data.decode("utf-8", errors="replace"))
        return text.encode()[-STDERR_TAIL_BYTES:].decode(errors="ignore")

    def _synthesize(
        self,
        job: Job,
        started: dict[str, Any] | None,
        reason: str,
        returncode: int | None,
        tail: str,
    ) -> dict[str, Any]:
        """A verdict for a job whose worker printed none."""
        started = started or {}
        exit_code = returncode if returncode is not None and returncode >= 0 else 3
        if returncode is not None and returncode < 0:
            exit_code = 128 - returncode  # the shell's convention: 137 for SIGKILL
        verdict = Verdict(
            run_id=started.get("run_id"),
            session_id=started.get("session_id"),
            provider=started.get("provider") or job.provider.split(":")[0],
            model=started.get("model"),
            mode=job.mode,
            verdict="error",
            exit_code=exit_code,
            timed_out="timeout" in reason,
            interrupted=self.interrupted,
            step_cap=job.max_turns or get_mode(job.mode).step_cap,
            parse_state="unavailable",
            parse_error="result: the worker printed no verdict, so no result could be read.",
            stderr_tail=tail,
            reason=reason,
            synthesized=True,
            workdir=started.get("workdir") or (str(job.workdir) if job.workdir else None),
            log_path=started.get("log_path"),
            events_path=started.get("events_path"),
        )
        sys.stderr.write(f"swarmdeck: job {job.name}: error ({reason})\n")
        return {"job": job.name, **verdict.model_dump()}


def _echo_started(_index: int, started: dict[str, Any]) -> None:
    sys.stderr.write(json.dumps(started, ensure_ascii=False) + "\n")
    sys.stderr.flush()


def run_fanout(
    jobs: list[Job], *, max_parallel: int, settings: Settings | None = None
) -> list[dict[str, Any]]:
    """Run every job; the verdicts in job order, each with `job`."""
    runner = Fanout(jobs, max_parallel, settings or load_settings())
    return asyncio.run(runner.run())
