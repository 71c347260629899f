"""A dispatch, checked and resolved before anything runs: the options, the mode, the
provider, the task (through the guards), the workdir or the session to resume."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.config import Settings, load_settings
from swarmdeck.dispatch import guards
from swarmdeck.dispatch.modes import ModeSpec, get_mode
from swarmdeck.dispatch.settings import DispatchSettings, load_dispatch_settings
from swarmdeck.errors import MissingKeyError, UsageError
from swarmdeck.models.registry import ProviderConfig, ProviderRegistry
from swarmdeck.runners.base import BUILT_IN, RUNNER_KIND, RUNNER_OPTION
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
    # The step cap: model turns allowed in this run (the verdict's `step_cap`).
    max_turns: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost: float | None = Field(default=None, gt=0)
    max_children: int | None = Field(default=None, ge=0)
    progress: bool = True
    # The user accepts shell tools without a sandbox (write modes; read-only ones need one).
    no_sandbox: bool = False
    # `run` exits 124 on a timeout; `dispatch` (None) exits 3 like any other unfinished run.
    timeout_exit_code: int | None = None
    # Run in this process even when a fleet worker serves the store.
    local: bool = False
    # Hand the session to the fleet and return at once (its id is in the started line).
    detach: bool = False
    # An external runner instead of the built-in loop (None: the provider's `runner`).
    runner: str | None = None
    # Where the session's files live: store or shared (None: $SWARMDECK_WORKSPACE, else
    # shared); the host checks the value when it creates the session.
    workspace: Literal["store", "shared"] | None = None
    # How a store workspace's changes come back: a branch swarmdeck/<run>, or a patch.
    deliver: Literal["branch", "patch"] = "branch"


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
    budget: dict[str, float] = field(default_factory=dict)
    max_children: int | None = None
    # The runner: `swarmdeck` (the built-in loop) or an external one (runners/).
    runner: str = BUILT_IN

    @property
    def external(self) -> bool:
        """True when an external runner runs the session instead of the built-in loop."""
        return self.runner != BUILT_IN

    def runner_options(self) -> dict[str, Any]:
        """The session options that hand the session to an external runner (runners/)."""
        if not self.external:
            return {}
        return {"kind": RUNNER_KIND, RUNNER_OPTION: self.runner}

    def limit_options(self) -> dict[str, Any]:
        """The session options that carry this run's budget and child limit."""
        return limit_options(self.budget, self.max_children)

    @property
    def no_sandbox(self) -> bool:
        """True when the user accepts tools without a sandbox (flag or settings.yaml)."""
        return self.opts.no_sandbox or self.settings.no_sandbox

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
            "runner": self.runner,
            "budget": self.budget,
            "max_children": self.max_children,
            "tools": list(self.spec.tools),
            "timeout_s": self.timeout_s,
            "idle_timeout_s": self.idle_timeout_s,
            "system_prompt": self.spec.prompt(str(self.workdir), self.step_cap, self.external),
            "task": self.task,
        }


def budget_of(
    provider: ProviderConfig, model: str, max_tokens: int | None, max_cost: float | None
) -> dict[str, float]:
    """The session budget the flags ask for; a cost limit on an unpriced model is refused.

    Without prices every call costs "unknown", so a cost limit would never stop anything.
    """
    budget: dict[str, float] = {}
    if max_tokens is not None:
        budget["max_tokens"] = float(max_tokens)
    if max_cost is not None:
        if max_cost <= 0:
            raise UsageError("--max-cost must be more than 0", "e.g. --max-cost 0.50 (USD)")
        from swarmdeck.models.pricing import cost_usd
        from swarmdeck.models.types import Usage

        if cost_usd(provider.key, model, Usage(input=1000, output=1000)) is None:
            raise UsageError(
                f"--max-cost: no prices are known for {provider.key}:{model}, so its cost "
                "cannot be counted",
                "limit it with --max-tokens instead",
            )
        budget["max_cost"] = float(max_cost)
    return budget


def limit_options(budget: dict[str, float], max_children: int | None) -> dict[str, Any]:
    """Session options for a budget and a child limit (the runtime's own option names)."""
    options: dict[str, Any] = {}
    if budget:
        options["budget"] = dict(budget)
    if max_children is not None:
        options["max_children"] = max_children
    return options


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
    if opts.no_sandbox and spec.read_only:
        raise UsageError(
            f"--no-sandbox does not apply to {spec.name} mode",
            "a read-only mode runs the shell only inside a sandbox; without one it keeps "
            "the file tools",
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
    if opts.session and redactor.contains_secret(opts.session):
        # Not echoed, not looked up: an id that holds a key would land in the error line.
        raise UsageError("--session refused: it contains a credential", "pass a session id")
    resume = _resume_target(settings, opts, redactor) if opts.session else None
    workdir = Path(resume.workdir) if resume else _workdir(opts.workdir)
    if opts.worktree:
        from swarmdeck.workspace.worktrees import check_clean

        check_clean(workdir)
    cap = opts.max_turns or dsettings.step_caps.get(spec.name) or spec.step_cap
    runner = choose_runner(opts.runner or config.runner, config, resume)
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
        budget=budget_of(config, model_name, opts.max_tokens, opts.max_cost),
        max_children=opts.max_children,
        runner=runner,
    )


def choose_runner(name: str, config: ProviderConfig, resume: SessionRecord | None) -> str:
    """The run's runner, checked against the provider's wire; a resume keeps the session's."""
    from swarmdeck.runners.adapters import ADAPTERS

    if resume is not None:
        return str(resume.options.get("runner") or BUILT_IN)
    if name == BUILT_IN:
        return name
    adapter = ADAPTERS.get(name)
    if adapter is None:
        known = ", ".join([BUILT_IN, *sorted(ADAPTERS)])
        raise UsageError(f"unknown runner {name!r}", f"use one of: {known}")
    if config.kind not in adapter.kinds:
        raise UsageError(
            f"runner {name} speaks the {adapter.wire} API, and provider {config.key} is "
            f"{config.kind}",
            f"pick a provider of kind {' or '.join(adapter.kinds)} for it",
        )
    return name


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
