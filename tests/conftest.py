"""Shared fixtures: an isolated home, provider files, and the CLI as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

pytest_plugins = ["swarmdeck.testing.pytest_plugin"]


@pytest.fixture
def sd_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh SWARMDECK_HOME on SQLite for this test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    monkeypatch.delenv("SWARMDECK_STORE", raising=False)
    return home


def write_provider(
    home: Path, key: str, base_url: str, kind: str = "openai", **fields: object
) -> Path:
    """A user provider file pointing at a (fake) endpoint; no key needed unless asked."""
    providers = home / "providers"
    providers.mkdir(exist_ok=True)
    doc = {
        "key": key,
        "kind": kind,
        "base_url": base_url,
        "model": fields.pop("model", "scripted"),
        "display_name": fields.pop("display_name", f"test {key}"),
        "needs_key": fields.pop("needs_key", False),
        **fields,
    }
    path = providers / f"{key}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class CliResult:
    """What a CLI run printed and returned."""

    code: int
    stdout: str
    stderr: str


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment a CLI subprocess runs with."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMDECK_")}
    env["SWARMDECK_HOME"] = str(home)
    env.update(extra)
    return env


def run_cli(home: Path, *args: str, timeout: float = 60, **env: str) -> CliResult:
    """Run `python -m swarmdeck ARGS` as a real process."""
    proc = subprocess.run(
        [sys.executable, "-m", "swarmdeck", *args],
        env=cli_env(home, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    """A small project directory for a session to work in."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "README.md").write_text("# project\nhello\n")
    (root / "app.py").write_text("def main():\n    return 42\n")
    yield root
