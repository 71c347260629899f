"""Settings: the home dir, the store URL, and runtime defaults."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

HOME_ENV = "SWARMDECK_HOME"
STORE_ENV = "SWARMDECK_STORE"
# The host name a process registers under: workers on one machine are told apart from
# those on others by it (same host: a dead pid is seen at once; another host: by its lease).
HOSTNAME_ENV = "SWARMDECK_HOSTNAME"
LEASE_ENV = "SWARMDECK_LEASE_SECONDS"
WORKER_CONCURRENCY_ENV = "SWARMDECK_WORKER_CONCURRENCY"
LEASE_SECONDS = 3.0


def home_dir() -> Path:
    """The swarmdeck home: $SWARMDECK_HOME or ~/.swarmdeck."""
    raw = os.environ.get(HOME_ENV)
    return Path(raw).expanduser() if raw else Path.home() / ".swarmdeck"


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
    worker_concurrency: int = 1000
    queue_concurrency: int | None = None
    # How often a worker looks for sessions handed to the fleet (SQLite; PostgreSQL is told
    # at once by NOTIFY and looks this often only as a fallback).
    handover_poll_seconds: float = 0.02
    rollover_iterations: int = 200
    artifact_max_bytes: int = 1_000_000
    retry_after_cap_seconds: float = 60.0
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def is_sqlite(self) -> bool:
        """True for the embedded single-file store."""
        return self.store_url.startswith("sqlite")

    @property
    def providers_dir(self) -> Path:
        """User provider files that override the packaged ones."""
        return self.home / "providers"

    @property
    def credentials_dir(self) -> Path:
        """0700 directory of 0600 key files."""
        return self.home / "credentials"

    @property
    def runs_dir(self) -> Path:
        """Per-run directories: logs, verdicts, the run's own HOME and tmp."""
        return self.home / "runs"

    @property
    def artifacts_dir(self) -> Path:
        """Artifact files; the catalog keeps their metadata."""
        return self.home / "artifacts"


def load_settings() -> Settings:
    """Settings from the environment; the home dir is created on first use."""
    home = home_dir()
    home.mkdir(parents=True, exist_ok=True)
    store = os.environ.get(STORE_ENV) or f"sqlite:///{home / 'swarmdeck.sqlite'}"
    fleet: dict[str, object] = {}
    if os.environ.get(HOSTNAME_ENV):
        fleet["hostname"] = os.environ[HOSTNAME_ENV]
    if os.environ.get(LEASE_ENV):
        fleet["lease_seconds"] = _positive(LEASE_ENV, float)
        fleet["heartbeat_seconds"] = min(1.0, float(fleet["lease_seconds"]) / 3)
    if os.environ.get(WORKER_CONCURRENCY_ENV):
        fleet["worker_concurrency"] = int(_positive(WORKER_CONCURRENCY_ENV, int))
    return Settings(home=home, store_url=store, **fleet)  # type: ignore[arg-type]


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
