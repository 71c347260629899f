"""Settings: the home dir, the store URL, and runtime defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

HOME_ENV = "SWARMDECK_HOME"
STORE_ENV = "SWARMDECK_STORE"


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


def ensure_home(home: Path) -> Path:
    """The home dir, created on first use; StoreError when it cannot be one."""
    from swarmdeck.errors import StoreError

    hint = f"set {HOME_ENV} to a writable directory"
    if home.exists() and not home.is_dir():
        raise StoreError(f"the swarmdeck home {home} is not a directory", hint)
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the swarmdeck home {home}: {exc.strerror}", hint) from None
    return home


def load_settings() -> Settings:
    """Settings from the environment; the home dir is created on first use."""
    home = ensure_home(home_dir())
    store = os.environ.get(STORE_ENV) or f"sqlite:///{home / 'swarmdeck.sqlite'}"
    return Settings(home=home, store_url=store)
