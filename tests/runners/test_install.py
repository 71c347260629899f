"""Runners install from npm into swarmdeck's home at their pinned version, not globally."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from swarmdeck.errors import ConfigError
from swarmdeck.runners import install
from swarmdeck.runners.pins import PINS
from tests.conftest import run_cli


def test_unknown_runner_is_a_config_error_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        install.status(tmp_path, "aider")
    assert "opencode" in caught.value.one_line()


def test_status_of_a_runner_not_installed(tmp_path: Path) -> None:
    state = install.status(tmp_path, "codex")
    assert (state.installed, state.binary, state.pinned) == (None, None, PINS["codex"].version)
    assert install.uninstall(tmp_path, "codex") is False


def test_opencode_installs_pinned_into_home_runs_and_uninstalls(tmp_path: Path) -> None:
    if shutil.which("npm") is None:
        pytest.skip("npm is not on PATH: runner opencode cannot be installed here")
    try:
        state = install.install(tmp_path, "opencode")
    except ConfigError as exc:
        pytest.skip(f"runner opencode cannot be installed here: {exc.one_line()}")
    assert state.installed == PINS["opencode"].version
    assert state.binary is not None
    assert state.binary.is_relative_to(tmp_path / "runners" / "opencode")
    shown = subprocess.run(
        [str(state.binary), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert shown.stdout.strip() == PINS["opencode"].version
    assert install.uninstall(tmp_path, "opencode") is True
    assert install.status(tmp_path, "opencode").installed is None


def test_cli_status_lists_each_runner_and_refuses_an_unknown_one(sd_home: Path) -> None:
    shown = run_cli(sd_home, "runner", "status")
    assert shown.code == 0, shown.stderr
    names = [line.split()[0] for line in shown.stdout.splitlines()]
    assert names == sorted(PINS)
    assert "not installed" in shown.stdout
    bad = run_cli(sd_home, "runner", "install", "aider")
    assert bad.code == 2
    assert "unknown runner 'aider'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_dispatch_here_with_a_runner_not_installed_is_refused_before_anything_runs(
    sd_home: Path, workdir: Path
) -> None:
    from tests.conftest import write_provider

    write_provider(sd_home, "oa", "http://127.0.0.1:9/v1")
    args = ["--provider", "oa", "--mode", "explore", "--workdir", str(workdir), "--task", "t"]
    done = run_cli(sd_home, "dispatch", *args, "--runner", "codex", "--local")
    assert done.code == 2, done.stderr
    assert "runner codex is not installed here" in done.stderr
    assert "swarmdeck runner install codex" in done.stderr
    assert not (sd_home / "runs").exists() or not any((sd_home / "runs").iterdir())


def test_status_names_the_runners_installed(sd_home: Path) -> None:
    shown = run_cli(sd_home, "status", "--json")
    assert shown.code == 0, shown.stderr
    runners = json.loads(shown.stdout)["runners"]
    assert sorted(runners) == sorted(PINS)
    assert all(r["installed"] is None and r["binary"] is None for r in runners.values())
    text = run_cli(sd_home, "status", COLUMNS="80")
    assert "runners installed: none" in text.stdout
    assert "swarmdeck runner install" in text.stdout
