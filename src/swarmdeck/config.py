"""Settings: the home dir, the store URL, and runtime defaults.

The user may write `<home>/settings.yaml`; today it holds one setting:

```yaml
sandbox: off   # accept shell tools without a sandbox where none works (write modes only)
```
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from swarmdeck.errors import ConfigError
from swarmdeck.filemodes import private_home

HOME_ENV = "SWARMDECK_HOME"
STORE_ENV = "SWARMDECK_STORE"
SETTINGS_FILE = "settings.yaml"
SANDBOX_VALUES = {"auto": False, "off": True}


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
    # The user accepts shell tools without a sandbox (settings.yaml `sandbox: off`).
    no_sandbox: bool = False
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


def load_settings() -> Settings:
    """Settings from the environment and settings.yaml; the home is created on first use."""
    home = ensure_home(home_dir())
    store = os.environ.get(STORE_ENV) or f"sqlite:///{home / 'swarmdeck.sqlite'}"
    return Settings(home=home, store_url=store, no_sandbox=sandbox_opted_out(home))


def _user_settings(home: Path) -> dict[str, Any]:
    path = home / SETTINGS_FILE
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {' '.join(str(exc).split())[:200]}", "fix the file") from None
    if not isinstance(data, dict) or set(data) - {"sandbox"}:
        raise ConfigError(f"{path}: the only setting is `sandbox: auto|off`", "fix the file")
    return data


def sandbox_opted_out(home: Path | None = None) -> bool:
    """True when `<home>/settings.yaml` says `sandbox: off` (YAML reads a bare off as false)."""
    value = _user_settings(home or home_dir()).get("sandbox", "auto")
    value = "off" if value is False else str(value).lower()
    if value not in SANDBOX_VALUES:
        raise ConfigError(
            f"{(home or home_dir()) / SETTINGS_FILE}: sandbox is {value!r}",
            "use `sandbox: auto` or `sandbox: off`",
        )
    return SANDBOX_VALUES[value]
