"""A dispatch, checked and resolved before anything runs: the options, the mode, the
provider, the task (through the guards), the workdir or the session to resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.config import Settings, load_settings
from swarmdeck.dispatch import guards
from swarmdeck.dispatch.modes import ModeSpec, get_mode
from swarmdeck.dispatch.settings import DispatchSettings, load_dispatch_settings
from swarmdeck.errors import MissingKeyError, UsageError
from swarmdeck.models.registry import ProviderConfig, ProviderRegistry
from swarmdeck.secrets.redact import Redactor, load_redactor
from swarmdeck.secrets.store import CredentialStore

WORKTREES_DIR = "worktrees"


class DispatchOptions(BaseModel):
    """The options of `dispatch` and `run`, as the command line gave them."""

    model_config = ConfigDict(extra="forbid")

    provider: str = Field(min_length=1)
    mode: str
    workdir: Path | None = None
    task: str | None = None
    task_file: Path | None = None
    worktree: bool = False
    timeout_s: float | None = Field(default=None, ge=0)
    idle_timeout_s: float | None = Field(default=None, ge=0)
    session: str | None = None
    dry_run: bool = False
    max_steps: int | None = Field(default=None, ge=1)
    progress: bool = True
    # `run` exits 124 on a timeout; `dispatch` (None) exits 3 like any other unfinished run.
    timeout_exit_code: int | None = None
    # Run in this process even when a fleet worker serves the store.
    local: bool = False
    # Hand the session to the fleet and return at once (its id is in the started line).
    detach: bool = False


@dataclass
class Plan:
    """A checked dispatch, ready to run: nothing has been stored or sent yet."""

    opts: DispatchOptions
    settings: Settings
    spec: ModeSpec
    task: str
    provider: ProviderConfig
    model_ref: str
    workdir: Path
    step_cap: int
    timeout_s: float | None
    idle_timeout_s: float | None
    resume: SessionRecord | None = None
    redactor: Redactor = field(default_factory=Redactor)

    def dry_run_doc(self) -> dict[str, Any]:
        """What would run, for --dry-run."""
        # Imported here: the fleet path starts before the verdict's models are needed.
        from swarmdeck.dispatch.verdict import SCHEMA_VERSION

        return {
            "type": "swarmdeck.dry_run",
            "schema_version": SCHEMA_VERSION,
            "provider": self.provider.key,
            "model": self.model_ref,
            "mode": self.spec.name,
            "workdir": str(self.workdir),
            "worktree": self.opts.worktree,
            "session_id": self.resume.id if self.resume else None,
            "step_cap": self.step_cap,
            "tools": list(self.spec.tools),
            "timeout_s": self.timeout_s,
            "idle_timeout_s": self.idle_timeout_s,
            "system_prompt": self.spec.prompt(str(self.workdir), self.step_cap),
            "task": self.task,
        }


def _limit(value: float | None, default: float) -> float | None:
    chosen = default if value is None else value
    return chosen if chosen > 0 else None


def prepare(opts: DispatchOptions, settings: Settings | None = None) -> Plan:
    """Resolve and check everything a run needs, without the engine or any model."""
    settings = settings or load_settings()
    dsettings: DispatchSettings = load_dispatch_settings(settings.home)
    spec = get_mode(opts.mode)
    task = guards.read_task(opts.task, opts.task_file)
    guards.check_worktree_use(spec, opts.worktree)
    if spec.name == "resume" and not opts.session:
        raise UsageError("resume mode needs --session ID", "pass the session_id of the verdict")
    if opts.session and spec.name != "resume":
        raise UsageError(
            "--session only works with --mode resume", "it continues an earlier code session"
        )
    if opts.detach and (opts.local or spec.name == "resume"):
        raise UsageError(
            "--detach hands a new session to the fleet; it cannot run here or resume one",
            "drop --local (or --detach)",
        )
    registry = ProviderRegistry.load(settings.providers_dir)
    config, model_name = registry.resolve(opts.provider)
    credentials = CredentialStore(settings.credentials_dir)
    if config.needs_key and not credentials.has(config.key):
        raise MissingKeyError(
            f"no key for provider {config.key}", f"run `swarmdeck key set {config.key}`"
        )
    redactor = load_redactor(credentials)
    guards.check_task_text(task, redactor)
    resume = _resume_target(settings, opts, redactor) if opts.session else None
    workdir = Path(resume.workdir) if resume else _workdir(opts.workdir)
    if opts.worktree:
        from swarmdeck.workspace.worktrees import check_clean

        check_clean(workdir)
    cap = opts.max_steps or dsettings.step_caps.get(spec.name) or spec.step_cap
    return Plan(
        opts=opts,
        settings=settings,
        spec=spec,
        task=task,
        provider=config,
        model_ref=f"{config.key}:{model_name}",
        workdir=workdir,
        step_cap=cap,
        timeout_s=_limit(opts.timeout_s, dsettings.timeout_s),
        idle_timeout_s=_limit(opts.idle_timeout_s, dsettings.idle_timeout_s),
        resume=resume,
        redactor=redactor,
    )


def _workdir(path: Path | None) -> Path:
    if path is None:
        raise UsageError("--workdir is required", "pass the project directory to work in")
    path = path.expanduser()
    if not path.is_dir():
        raise UsageError(
            f"workdir does not exist: {path}", "pass an existing directory to --workdir"
        )
    return path.resolve()


def _resume_target(settings: Settings, opts: DispatchOptions, redactor: Redactor) -> SessionRecord:
    """The code session to continue; its own workdir (or worktree) is where the run goes."""
    from swarmdeck.catalog.catalog import Catalog

    catalog = Catalog.open(settings.store_url, redactor.redact)
    record = catalog.get_session(catalog.resolve_session_id(opts.session or ""))
    if record.mode not in ("code", "resume"):
        raise UsageError(
            f"session {record.id} is a {record.mode} session; resume continues code sessions",
            "dispatch a new run instead",
        )
    if opts.workdir is not None:
        given = opts.workdir.expanduser().resolve()
        if given != Path(record.workdir) and not _is_source_of(settings, given, record):
            raise UsageError(
                f"session {record.id} works in {record.workdir}, not {given}",
                "drop --workdir, or pass the session's own workdir",
            )
    return record


def _is_source_of(settings: Settings, given: Path, record: SessionRecord) -> bool:
    """True when the session runs in a worktree made from `given`."""
    from swarmdeck.workspace.worktrees import load_meta

    worktrees = settings.home / WORKTREES_DIR
    for parent in (Path(record.workdir), *Path(record.workdir).parents):
        if parent.parent == worktrees:
            meta = load_meta(worktrees, parent)
            return bool(meta and Path(meta.repo) == given)
    return False
