"""The suite's CLI fork server (tests/cli_fork.py) stands in for `python -m swarmdeck`:
a forked call prints, exits and sees its environment as an exec'd one does."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import FORK_ENV, cli_env, cli_fork_server, run_cli, write_provider
from tests.integration.test_sessions_support import finish


def _both(monkeypatch: pytest.MonkeyPatch, home: Path, *args: str, **env: str) -> list[tuple]:
    results = []
    for fork in ("1", "0"):
        monkeypatch.setenv(FORK_ENV, fork)
        res = run_cli(home, *args, **env)
        results.append((res.code, res.stdout, res.stderr))
    return results


def test_a_forked_call_prints_and_exits_as_an_execd_one(
    sd_home: Path, workdir: Path, fake_llm, monkeypatch: pytest.MonkeyPatch
) -> None:
    forked, execd = _both(monkeypatch, sd_home, "--help")
    assert forked == execd and forked[0] == 0 and "swarmdeck [OPTIONS] COMMAND" in forked[1]
    forked, execd = _both(monkeypatch, sd_home, "run", "--bogus")
    assert forked == execd and forked[0] == 2
    fake_llm.set_script({"scenarios": [{"turns": [{"text": "hello from the fake"}]}]})
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    runs = _both(monkeypatch, sd_home, "run", "hi", "-m", "fake", "-C", str(workdir), "-q")
    assert [r[:2] for r in runs] == [(0, "hello from the fake\n")] * 2


def test_a_forked_call_has_its_own_environment_directory_and_input(
    sd_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `key set --stdin` reads the key from stdin and stores it under the call's home.
    monkeypatch.chdir(tmp_path)
    write_provider(sd_home, "fake", "http://127.0.0.1:9/v1", needs_key=True)
    res = run_cli(sd_home, "key", "set", "fake", "--stdin", stdin_text="sk-forked\n")
    assert res.code == 0, res.stderr
    assert (sd_home / "credentials" / "fake.key").read_text().strip() == "sk-forked"
    other = tmp_path / "other-home"
    other.mkdir(mode=0o700)
    assert run_cli(other, "sessions", "ls").stdout.strip() == ""
    assert not (sd_home / "other-home").exists() and (other / "swarmdeck.sqlite").exists()


def test_a_forked_process_is_killed_by_its_timeout_and_leads_its_own_group(
    sd_home: Path, tmp_path: Path
) -> None:
    server = cli_fork_server()
    env = cli_env(sd_home)
    script = tmp_path / "script.json"
    script.write_text('{"scenarios": [{"turns": [{"text": "x"}]}]}')
    serve = ["fake-llm", "--port", "0", "--script", str(script)]
    proc = server.start(serve, env, new_session=True)
    try:
        assert os.getpgid(proc.pid) == proc.pid
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.5)
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    assert finish(proc)[0] == -signal.SIGKILL
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        server.run(serve, env, timeout=1)
    assert time.monotonic() - started < 20
