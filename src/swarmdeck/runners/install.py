"""Install, remove and report the pinned runners under `<home>/runners/<name>`, not globally."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from swarmdeck.errors import ConfigError
from swarmdeck.runners.pins import PINS, RunnerPackage

INSTALL_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class RunnerState:
    """What `runner status` shows of one runner."""

    name: str
    installed: str | None
    binary: Path | None

    @property
    def pinned(self) -> str:
        """The version swarmdeck installs (runners/pins.py)."""
        return PINS[self.name].version


def pinned(name: str) -> RunnerPackage:
    """The pinned package of a runner name; ConfigError naming the known ones otherwise."""
    if name not in PINS:
        known = ", ".join(sorted(PINS))
        raise ConfigError(f"unknown runner {name!r}", f"use one of: {known}")
    return PINS[name]


def runner_dir(home: Path, name: str) -> Path:
    """Where a runner is installed: `<home>/runners/<name>`."""
    return home / "runners" / name


def install(home: Path, name: str) -> RunnerState:
    """`npm install` the pinned version into the runner's own prefix; ConfigError on failure."""
    pin = pinned(name)
    npm = shutil.which("npm")
    if npm is None:
        raise ConfigError("npm is not on PATH", "install Node.js and npm, then retry")
    prefix = runner_dir(home, name)
    prefix.mkdir(parents=True, exist_ok=True, mode=0o700)
    argv = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund"]
    done = subprocess.run(
        [*argv, f"{pin.package}@{pin.version}"],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"npm could not install {pin.package}@{pin.version}: {last}")
    return status(home, name)


def uninstall(home: Path, name: str) -> bool:
    """Remove the runner's prefix; False when it was not installed."""
    prefix = runner_dir(home, pinned(name).name)
    if not prefix.exists():
        return False
    shutil.rmtree(prefix)
    return True


def require_installed(home: Path, name: str) -> RunnerState:
    """The runner's state; ConfigError saying how to install it when it is not."""
    state = status(home, name)
    if state.binary is None:
        raise ConfigError(
            f"runner {name} is not installed here", f"run `swarmdeck runner install {name}`"
        )
    return state


def status(home: Path, name: str) -> RunnerState:
    """The pinned and installed version of a runner, and its binary when installed."""
    pin = pinned(name)
    prefix = runner_dir(home, name)
    manifest = prefix / "node_modules" / pin.package / "package.json"
    installed = None
    if manifest.is_file():
        installed = str(json.loads(manifest.read_text(encoding="utf-8")).get("version"))
    binary = prefix / "node_modules" / ".bin" / pin.command
    return RunnerState(name, installed, binary if binary.exists() else None)
