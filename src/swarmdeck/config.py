"""Settings: the home dir, the store URL, and runtime defaults.

The user may write `<home>/settings.yaml`:

```yaml
sandbox: off   # accept shell tools without a sandbox where none works (write modes only)
swarm:         # routing and limits of `swarmdeck swarm` (read by swarmdeck.swarm.settings)
  max_members: 5
  member_model: deepseek
  role_models: {security: anthropic, tests: glm}
model_aliases: {fast: deepseek:deepseek-chat}
telemetry:     # OpenTelemetry traces (the standard OTEL_* variables work as well)
  endpoint: http://127.0.0.1:4318   # OTLP/HTTP collector
  capture_content: false            # message contents in spans (redacted) only when true
tools:         # tools on demand (tools/tool_index.py)
  loading: lazy                     # or eager: every schema every turn
  core: {explore: [read_file, grep, shell, submit_result]}
  shared_prefix: true               # a swarm's sessions share one cached prompt prefix
project_docs: true   # AGENTS.md (or CLAUDE.md) from the repository's root to the workdir
```
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmdeck.errors import ConfigError
from swarmdeck.filemodes import private_home

HOME_ENV = "SWARMDECK_HOME"
STORE_ENV = "SWARMDECK_STORE"
# The host name a process registers under: workers on one machine are told apart from
# those on others by it (same host: a dead pid is seen at once; another host: by its lease).
HOSTNAME_ENV = "SWARMDECK_HOSTNAME"
LEASE_ENV = "SWARMDECK_LEASE_SECONDS"
WORKER_CONCURRENCY_ENV = "SWARMDECK_WORKER_CONCURRENCY"
LEASE_SECONDS = 3.0
SETTINGS_FILE = "settings.yaml"
SANDBOX_VALUES = {"auto": False, "off": True}
# The top-level keys settings.yaml may hold.
SETTINGS_KEYS = ("sandbox", "swarm", "model_aliases", "telemetry", "tools", "project_docs")
# The setting that enables the system agents without `swarmdeck system start`: the model
# they run on (never a default: the user names it).
SYSTEM_MODEL_ENV = "SWARMDECK_SYSTEM_MODEL"
# The least age (minutes) of an ended session or run that maintenance may remove.
GRACE_ENV = "SWARMDECK_CLEANUP_GRACE_MINUTES"


def home_dir() -> Path:
    """The swarmdeck home: $SWARMDECK_HOME or ~/.swarmdeck."""
    raw = os.environ.get(HOME_ENV)
    return Path(raw).expanduser() if raw else Path.home() / ".swarmdeck"


class UnderHome:
    """A directory of the swarmdeck home, named once: `settings.runs_dir` and the like."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, settings: Settings, owner: type | None = None) -> Path:
        return settings.home / self.name


@dataclass(frozen=True)
class Settings:
    """Where things live and the defaults a session starts with."""

    home: Path
    store_url: str
    max_children: int = 50
    max_depth: int = 2
    max_executor_threads: int = 8
    recv_poll_seconds: float = 0.05
    queue_poll_seconds: float = 0.05
    hostname: str = field(default_factory=socket.gethostname)
    # A worker's heartbeat is a lease: renewed every beat, it lapses when no beat landed for
    # lease_seconds, and then any live worker takes the worker's sessions over.
    heartbeat_seconds: float = 1.0
    lease_seconds: float = LEASE_SECONDS
    # Sessions one worker process runs at once, and all workers together (None: no limit).
    worker_concurrency: int = 10_000
    queue_concurrency: int | None = None
    # How often a worker looks for sessions handed to the fleet (SQLite; PostgreSQL is told
    # at once by NOTIFY and looks this often only as a fallback).
    handover_poll_seconds: float = 0.02
    rollover_iterations: int = 200
    artifact_max_bytes: int = 1_000_000
    retry_after_cap_seconds: float = 60.0
    # The user accepts shell tools without a sandbox (settings.yaml `sandbox: off`).
    no_sandbox: bool = False
    # The least time a session must have ended before maintenance tools may remove it or its
    # transcript, whatever a model asks for.
    cleanup_grace_minutes: float = 5.0
    system_model: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    # settings.yaml `tools:`: `loading: lazy` (the core set whole, the rest indexed until
    # loaded; the default) or `eager` (every schema every turn), and `core:` per mode.
    tool_loading: str = "lazy"
    core_tools: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # `shared_prefix: false`: a swarm's members and a parent's sub-agents each build their
    # own prompt instead of one cached prefix (runtime/family.py).
    shared_prefix: bool = True
    # `project_docs: false`: sessions are not shown the project's AGENTS.md files
    # (runtime/project_docs.py).
    project_docs: bool = True

    @property
    def is_sqlite(self) -> bool:
        """True for the embedded single-file store."""
        return self.store_url.startswith("sqlite")

    # User provider files that override the packaged ones.
    providers_dir = UnderHome("providers")

    # 0700 directory of 0600 key files.
    credentials_dir = UnderHome("credentials")

    # Per-run directories: logs, verdicts, the run's own HOME and tmp.
    runs_dir = UnderHome("runs")

    # Artifact files; the catalog keeps their metadata.
    artifacts_dir = UnderHome("artifacts")

    # Git worktrees that code runs made.
    worktrees_dir = UnderHome("worktrees")

    # Private git dirs and checkouts of the store workspaces this host captured or ran.
    workspaces_dir = UnderHome("workspaces")

    # The workdir of the system agents.
    system_dir = UnderHome("system")


def ensure_home(home: Path) -> Path:
    """The home dir, created (0700) on first use and tightened when others may enter it;
    StoreError when it cannot be one."""
    from swarmdeck.errors import StoreError

    hint = f"set {HOME_ENV} to a writable directory"
    if home.exists() and not home.is_dir():
        raise StoreError(f"the swarmdeck home {home} is not a directory", hint)
    try:
        private_home(home)
    except OSError as exc:
        raise StoreError(f"cannot create the swarmdeck home {home}: {exc.strerror}", hint) from None
    return home


def store_url_of(home: Path) -> str:
    """The store's URL: SWARMDECK_STORE, else the SQLite file in the home."""
    return os.environ.get(STORE_ENV) or f"sqlite:///{home / 'swarmdeck.sqlite'}"


def load_settings() -> Settings:
    """Settings from the environment and settings.yaml; the home is created on first use."""
    home = ensure_home(home_dir())
    store = store_url_of(home)
    fleet: dict[str, object] = {}
    if os.environ.get(HOSTNAME_ENV):
        fleet["hostname"] = os.environ[HOSTNAME_ENV]
    if os.environ.get(LEASE_ENV):
        fleet["lease_seconds"] = _positive(LEASE_ENV, float)
        fleet["heartbeat_seconds"] = min(1.0, float(fleet["lease_seconds"]) / 3)
    if os.environ.get(WORKER_CONCURRENCY_ENV):
        fleet["worker_concurrency"] = int(_positive(WORKER_CONCURRENCY_ENV, int))
    return Settings(
        home=home,
        store_url=store,
        no_sandbox=sandbox_opted_out(home),
        **tool_settings(home),
        project_docs=project_docs_setting(home),
        system_model=os.environ.get(SYSTEM_MODEL_ENV) or None,
        cleanup_grace_minutes=_minutes(os.environ.get(GRACE_ENV), Settings.cleanup_grace_minutes),
        **fleet,  # type: ignore[arg-type]
    )


def _positive(name: str, kind: type[float] | type[int]) -> float:
    """A positive number from the environment, or a one-line error saying which is wrong."""
    from swarmdeck.errors import UsageError

    raw = os.environ[name]
    try:
        value = kind(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(f"{name}={raw!r} is not a positive number", f"unset {name} or fix it")
    return value


def user_settings(home: Path) -> dict[str, Any]:
    """`<home>/settings.yaml` as a mapping ({} when there is none); ConfigError when it is
    not one, or holds a key no part of swarmdeck reads."""
    path = home / SETTINGS_FILE
    if not path.is_file():
        return {}
    import yaml  # only when there is a file: the fleet path's start-up is counted

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {' '.join(str(exc).split())[:200]}", "fix the file") from None
    if not isinstance(data, dict) or set(data) - set(SETTINGS_KEYS):
        raise ConfigError(f"{path}: the settings are {', '.join(SETTINGS_KEYS)}", "fix the file")
    return data


def user_setting(key: str, home: Path | None = None) -> Any:
    """One setting of `<home>/settings.yaml` as written (None when absent)."""
    return user_settings(home or home_dir()).get(key)


def tool_settings(home: Path) -> dict[str, Any]:
    """settings.yaml's `tools:` as Settings fields; ConfigError says what is wrong."""
    raw = user_settings(home).get("tools") or {}
    loading = raw.get("loading", "lazy") if isinstance(raw, dict) else None
    core = raw.get("core", {}) if isinstance(raw, dict) else None
    shared = raw.get("shared_prefix", True) if isinstance(raw, dict) else None
    if (
        loading not in ("lazy", "eager")
        or not isinstance(core, dict)
        or not isinstance(shared, bool)
        or set(raw) - {"loading", "core", "shared_prefix"}
        or not all(
            isinstance(v, list) and all(isinstance(n, str) for n in v) for v in core.values()
        )
    ):
        raise ConfigError(
            f"{home / SETTINGS_FILE}: tools takes `loading: lazy|eager`, `core:` (a list of "
            "tool names per mode) and `shared_prefix: true|false`",
            "fix the file (see README, Tools on demand)",
        )
    return {
        "tool_loading": loading,
        "core_tools": {str(m): tuple(v) for m, v in core.items()},
        "shared_prefix": shared,
    }


def project_docs_setting(home: Path) -> bool:
    """settings.yaml's `project_docs: true|false` (true when absent)."""
    value = user_settings(home).get("project_docs", True)
    if not isinstance(value, bool):
        raise ConfigError(
            f"{home / SETTINGS_FILE}: project_docs is {value!r}",
            "use `project_docs: true` or `project_docs: false`",
        )
    return value


def sandbox_opted_out(home: Path | None = None) -> bool:
    """True when `<home>/settings.yaml` says `sandbox: off` (YAML reads a bare off as false)."""
    value = user_settings(home or home_dir()).get("sandbox", "auto")
    value = "off" if value is False else str(value).lower()
    if value not in SANDBOX_VALUES:
        raise ConfigError(
            f"{(home or home_dir()) / SETTINGS_FILE}: sandbox is {value!r}",
            "use `sandbox: auto` or `sandbox: off`",
        )
    return SANDBOX_VALUES[value]


def _minutes(raw: str | None, default: float) -> float:
    """A setting in minutes; ConfigError names it when it is not a number."""
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        from swarmdeck.errors import ConfigError

        raise ConfigError(f"{GRACE_ENV} must be a number of minutes, not {raw!r}")
    return value
