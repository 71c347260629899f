"""Settings: the home dir, the store URL, and runtime defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

HOME_ENV = "SWARMDECK_HOME"
STORE_ENV = "SWARMDECK_STORE"
# The setting that enables the system agents without `swarmdeck system start`: the model
# they run on (never a default: the user names it).
SYSTEM_MODEL_ENV = "SWARMDECK_SYSTEM_MODEL"
# The least age (minutes) of an ended session or run that maintenance may remove.
GRACE_ENV = "SWARMDECK_CLEANUP_GRACE_MINUTES"


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
    rollover_iterations: int = 200
    artifact_max_bytes: int = 1_000_000
    retry_after_cap_seconds: float = 60.0
    # The least time a session must have ended before maintenance tools may remove it or its
    # transcript, whatever a model asks for.
    cleanup_grace_minutes: float = 5.0
    system_model: str | None = None
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

    @property
    def worktrees_dir(self) -> Path:
        """Git worktrees that code runs made."""
        return self.home / "worktrees"

    @property
    def system_dir(self) -> Path:
        """The workdir of the system agents."""
        return self.home / "system"


def load_settings() -> Settings:
    """Settings from the environment; the home dir is created on first use."""
    home = home_dir()
    home.mkdir(parents=True, exist_ok=True)
    store = os.environ.get(STORE_ENV) or f"sqlite:///{home / 'swarmdeck.sqlite'}"
    return Settings(
        home=home,
        store_url=store,
        system_model=os.environ.get(SYSTEM_MODEL_ENV) or None,
        cleanup_grace_minutes=_minutes(os.environ.get(GRACE_ENV), Settings.cleanup_grace_minutes),
    )


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
