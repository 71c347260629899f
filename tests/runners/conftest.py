"""Runners installed once per test session from npm (pinned), shown to each test's home."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from swarmdeck.errors import ConfigError
from swarmdeck.runners import install
from swarmdeck.runners.pins import PINS

KEY = "sk-runner-test-0123456789abcdefXYZ"


@pytest.fixture(scope="session")
def runner_cache(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Install a runner once (skipping the tests with the reason when it cannot be)."""
    root = tmp_path_factory.mktemp("runner-cache")
    failed: dict[str, str] = {}

    def installed(name: str) -> Path:
        if name in failed:
            pytest.skip(failed[name])
        if install.status(root, name).binary is None:
            if shutil.which("npm") is None:
                failed[name] = f"npm is not on PATH: runner {name} cannot be installed here"
                pytest.skip(failed[name])
            try:
                install.install(root, name)
            except ConfigError as exc:
                failed[name] = f"runner {name} cannot be installed here: {exc.one_line()}"
                pytest.skip(failed[name])
        return install.runner_dir(root, name)

    return installed


@pytest.fixture
def with_runner(sd_home: Path, runner_cache: Callable[[str], Path]) -> Callable[[str], Path]:
    """Make a cached runner this test home's installed runner (a symlink, as a copy would
    cost seconds)."""

    def show(name: str) -> Path:
        target = sd_home / "runners" / name
        target.parent.mkdir(exist_ok=True)
        target.symlink_to(runner_cache(name), target_is_directory=True)
        assert install.status(sd_home, name).installed == PINS[name].version
        return target

    return show


def block_text(result: dict[str, object]) -> str:
    """An answer that ends with the result block."""
    from swarmdeck.runners.result_block import render_block

    return f"Here is what I found.\n\n{render_block(result)}"


def verdict_of(stdout: str) -> tuple[dict[str, object], dict[str, object]]:
    """The two lines of a dispatch."""
    lines = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert len(lines) == 2, stdout
    return lines[0], lines[1]


def processes_running(word: str) -> list[int]:
    """Pids of installed runners (under node_modules) whose command line holds `word`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if word.encode() in cmdline and b"node_modules" in cmdline:
            pids.append(int(entry.name))
    return pids


def leaks_of(pid: int, secret: str) -> list[str]:
    """Where the secret shows in a process's argv or environment."""
    found = []
    for name in ("cmdline", "environ"):
        try:
            data = (Path("/proc") / str(pid) / name).read_bytes()
        except OSError:
            continue
        if secret.encode() in data:
            found.append(name)
    return found


def processes_under(home: Path) -> list[int]:
    """Pids whose command line or environment names this test's home (its runner runs)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if str(home / "runs").encode() in seen:
            pids.append(int(entry.name))
    return pids
