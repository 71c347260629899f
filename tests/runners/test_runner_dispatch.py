"""`dispatch` with an external runner against the fake server (issue 33), for each runner:
the two lines in every mode, the key kept out of the runner's reach, the read-only
sandbox, the ledger, a SIGKILL mid-run reported as interrupted, and a resume through the
runner's own session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.config import load_settings
from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import Script
from tests.conftest import cli_env, run_cli, write_provider
from tests.runners.conftest import (
    KEY,
    block_text,
    leaks_of,
    processes_running,
    processes_under,
    verdict_of,
)

pytestmark = pytest.mark.timeout(240)


@dataclass(frozen=True)
class Kind:
    """How a runner is reached and how its shell tool is called."""

    name: str
    wire: str
    model: str
    shell: str

    def base_url(self, fake: FakeLLM) -> str:
        return fake.openai_base_url if self.wire == "openai" else fake.anthropic_base_url

    def shell_call(self, command: str) -> dict[str, object]:
        if self.name == "codex":
            return {"name": self.shell, "arguments": {"cmd": command}}
        return {"name": self.shell, "arguments": {"command": command, "description": "run"}}


KINDS = [
    Kind("opencode", "openai", "m1", "bash"),
    Kind("claude", "anthropic", "claude-sonnet-4-5", "Bash"),
    Kind("codex", "openai", "gpt-5-codex", "exec_command"),
]


@pytest.fixture(params=KINDS, ids=lambda k: k.name)
def kind(request: pytest.FixtureRequest, with_runner: Callable[[str], Path]) -> Kind:
    """Each runner, installed in this test's home."""
    with_runner(request.param.name)
    return request.param


def _answer(mode: str) -> dict[str, object]:
    return {"text": block_text(RESULT_EXAMPLES[mode][0]), "usage": {"input": 300, "output": 40}}


def _fake(turns: list[dict[str, object]]) -> FakeLLM:
    return FakeLLM(Script.from_dict({"scenarios": [{"turns": turns}]}))


def _provider(home: Path, fake: FakeLLM, kind: Kind) -> None:
    write_provider(
        home, "rp", kind.base_url(fake), kind=kind.wire, needs_key=True, runner=kind.name,
        model=kind.model,
    )  # fmt: skip
    stored = run_cli(home, "key", "set", "rp", stdin_text=KEY + "\n")
    assert stored.code == 0, stored.stderr


def _key_seen(request: object) -> bool:
    headers = request.headers  # type: ignore[attr-defined]
    return KEY in headers.get("authorization", "") or headers.get("x-api-key") == KEY


def _dispatch(home: Path, workdir: Path, mode: str, *extra: str) -> tuple[int, dict, dict, str]:
    args = ["dispatch", "--provider", "rp", "--mode", mode, "--workdir", str(workdir)]
    done = run_cli(home, *args, "--task", "Look at the project.", *extra, timeout=180)
    started, verdict = verdict_of(done.stdout)
    return done.code, started, verdict, done.stderr


@pytest.mark.parametrize("mode", ["explore", "test", "review", "code"])
def test_every_mode_gives_the_two_lines_with_a_valid_result(
    mode: str, sd_home: Path, workdir: Path, kind: Kind
) -> None:
    with _fake([_answer(mode)]) as fake:
        _provider(sd_home, fake, kind)
        code, started, verdict, err = _dispatch(sd_home, workdir, mode)
        assert started["type"] == "swarmdeck.started"
        assert (code, verdict["verdict"], verdict["parse_state"]) == (0, "completed", "parsed"), err
        assert verdict["result"] == RESULT_EXAMPLES[mode][0]
        # The usage the runner reported is in the ledger, and so in the verdict.
        assert verdict["tokens"]["input"] == 300 and verdict["tokens"]["output"] == 40
        # The fake got the real key; the runner itself only ever had the run's token.
        assert fake.requests and all(_key_seen(r) for r in fake.requests)
    catalog = Catalog.open(load_settings().store_url)
    totals = catalog.usage_totals([verdict["session_id"]])
    assert (totals.input, totals.output) == (300, 40)


def test_a_malformed_block_gets_a_correction_through_the_runner_session(
    sd_home: Path, workdir: Path, kind: Kind
) -> None:
    bad = {"text": block_text({"facts": "not a list"})}
    with _fake([bad, _answer("explore")]) as fake:
        _provider(sd_home, fake, kind)
        code, _, verdict, err = _dispatch(sd_home, workdir, "explore")
        assert (code, verdict["verdict"]) == (0, "completed"), err
        # The correction went to the runner's same session: the model saw its first answer.
        last = json.dumps(fake.requests[-1].body)
        assert "not a list" in last and "was not accepted" in last
    shown = run_cli(sd_home, "sessions", "show", verdict["session_id"])
    assert f"runner {kind.name}" in shown.stdout, shown.stderr


def test_read_only_mode_write_is_denied_by_the_sandbox(
    sd_home: Path, workdir: Path, kind: Kind
) -> None:
    write = kind.shell_call("touch made-by-runner.txt")
    with _fake([{"text": "", "tool_calls": [write]}, _answer("explore")]) as fake:
        _provider(sd_home, fake, kind)
        code, _, verdict, err = _dispatch(sd_home, workdir, "explore")
        assert code == 0, err
    assert not (workdir / "made-by-runner.txt").exists()
    catalog = Catalog.open(load_settings().store_url)
    results = [e for e in catalog.events(verdict["session_id"]) if e.kind == "tool_result"]
    assert results and "Read-only file system" in results[0].payload["content"]


def test_key_stays_out_of_argv_env_and_config(sd_home: Path, workdir: Path, kind: Kind) -> None:
    slow = {**_answer("explore"), "delay": 4.0}
    with _fake([slow]) as fake:
        _provider(sd_home, fake, kind)
        args = ["dispatch", "--provider", "rp", "--mode", "explore", "--workdir", str(workdir)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "swarmdeck", *args, "--task", "t"],
            env=cli_env(sd_home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not fake.requests:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            pids = processes_running(kind.name)
            assert pids, "the runner is not running"
            assert {pid: leaks_of(pid, KEY) for pid in pids} == {pid: [] for pid in pids}
            _out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    names = ("opencode.json", "settings.json", "config.toml")
    configs = [p for p in (sd_home / "runs").rglob("*") if p.name in names]
    assert configs and all(KEY not in c.read_text() for c in configs)
    assert all(c.stat().st_mode & 0o077 == 0 for c in configs)
    for path in (sd_home / "runs").rglob("*"):
        if path.is_file() and path.stat().st_size < 5_000_000:
            assert KEY.encode() not in path.read_bytes(), path


def test_sigkill_mid_run_is_reported_interrupted_and_never_rerun(
    sd_home: Path, workdir: Path, kind: Kind
) -> None:
    with _fake([{**_answer("code"), "delay": 30.0}]) as fake:
        _provider(sd_home, fake, kind)
        args = ["dispatch", "--provider", "rp", "--mode", "code", "--workdir", str(workdir)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "swarmdeck", *args, "--task", "t"], env=cli_env(sd_home),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not fake.requests:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        started = json.loads(proc.stdout.read().splitlines()[0])
        asked = len(fake.requests)
        resumed = run_cli(sd_home, "sessions", "resume", started["session_id"], timeout=120)
        assert len(fake.requests) == asked, "the runner's run was run again"
    catalog = Catalog.open(load_settings().store_url)
    record = catalog.get_session(started["session_id"])
    assert record.status == "failed", (resumed.stdout, resumed.stderr)
    assert "cut off by a crash" in (record.error or "")


def test_resume_continues_the_runner_session(sd_home: Path, workdir: Path, kind: Kind) -> None:
    first = {"text": "FIRST-ANSWER " + block_text(RESULT_EXAMPLES["code"][0])}
    with _fake([first, _answer("code")]) as fake:
        _provider(sd_home, fake, kind)
        code, started, _, err = _dispatch(sd_home, workdir, "code")
        assert code == 0, err
        args = ["dispatch", "--provider", "rp", "--mode", "resume"]
        again = run_cli(
            sd_home, *args, "--session", started["session_id"], "--task", "Now add a test.",
            timeout=180,
        )  # fmt: skip
        assert again.code == 0, again.stderr
        _, verdict = verdict_of(again.stdout)
        assert verdict["verdict"] == "completed"
        # OpenCode's own session: the model saw the first run's answer and the new task.
        last = json.dumps(fake.requests[-1].body)
        assert "FIRST-ANSWER" in last and "Now add a test." in last


def test_a_wall_timeout_stops_the_runner_and_keeps_what_it_said(
    sd_home: Path, workdir: Path, with_runner: Callable[[str], Path]
) -> None:
    with_runner("opencode")
    kind = KINDS[0]
    said = {"text": "PARTIAL-WORK so far", "tool_calls": [kind.shell_call("ls")]}
    with _fake([said, {**_answer("explore"), "delay": 60.0}]) as fake:
        _provider(sd_home, fake, kind)
        # Room for OpenCode's start and first response on a loaded 2-core machine (it took
        # over 8 s there twice); the second response never comes before the timeout.
        code, _, verdict, err = _dispatch(sd_home, workdir, "explore", "--timeout", "15")
    assert (verdict["verdict"], verdict["timed_out"]) == ("error", True), err
    assert code != 0
    # The runner is gone, and what it said before the timeout is in the transcript.
    assert processes_under(sd_home) == []
    catalog = Catalog.open(load_settings().store_url)
    texts = [e.payload.get("text") for e in catalog.events(verdict["session_id"])]
    assert "PARTIAL-WORK so far" in texts


def test_a_runner_on_a_store_workspace_delivers_its_branch(
    sd_home: Path, tmp_path: Path, with_runner: Callable[[str], Path]
) -> None:
    with_runner("opencode")
    kind = KINDS[0]
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    (repo / "app.py").write_text("X = 1\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "first"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
    made = {"text": "", "tool_calls": [kind.shell_call("echo made > made.txt")]}
    with _fake([made, _answer("code")]) as fake:
        _provider(sd_home, fake, kind)
        code, _, verdict, err = _dispatch(sd_home, repo, "code", "--workspace", "store")
    assert code == 0, err
    # The runner worked on the store's copy: the planner's tree is as it was, and the
    # runner's file comes back on the branch.
    assert not (repo / "made.txt").exists()
    delivered = verdict["delivered"]
    assert delivered["kind"] == "branch" and delivered["files"] == ["made.txt"]
    shown = subprocess.run(
        ["git", "show", f"{delivered['branch']}:made.txt"], cwd=repo, capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    assert shown.stdout == "made\n"


def test_max_turns_stops_the_runner_at_the_cap(
    sd_home: Path, workdir: Path, with_runner: Callable[[str], Path]
) -> None:
    with_runner("opencode")
    kind = KINDS[0]
    looping = {"text": "STILL-LOOKING", "tool_calls": [kind.shell_call("ls")]}
    with _fake([looping, looping, looping, looping, _answer("explore")]) as fake:
        _provider(sd_home, fake, kind)
        code, _, verdict, err = _dispatch(sd_home, workdir, "explore", "--max-turns", "2")
        asked = [r for r in fake.requests if (r.body or {}).get("tools")]
    # As the built-in loop: two responses, the second still calling tools, then stopped.
    assert (verdict["verdict"], verdict["reason"]) == ("step_capped_partial", "step_cap"), err
    assert verdict["step_cap"] == 2 and len(asked) == 2 and code != 0
    assert processes_under(sd_home) == []
    catalog = Catalog.open(load_settings().store_url)
    assert len(catalog.events(verdict["session_id"], kinds=["assistant"])) == 2


def test_a_token_budget_stops_the_runner_when_spent(
    sd_home: Path, workdir: Path, with_runner: Callable[[str], Path]
) -> None:
    with_runner("opencode")
    kind = KINDS[0]
    costly = {"text": "WORKED-SO-FAR", "tool_calls": [kind.shell_call("ls")]}
    costly["usage"] = {"input": 5000, "output": 100}
    never = {**_answer("explore"), "delay": 60.0}
    with _fake([costly, never]) as fake:
        _provider(sd_home, fake, kind)
        code, _, verdict, err = _dispatch(sd_home, workdir, "explore", "--max-tokens", "1000")
        asked = [r for r in fake.requests if (r.body or {}).get("tools")]
    # The first response spent the budget: the runner was stopped before its second.
    assert (verdict["verdict"], verdict["reason"]) == ("budget_exhausted", "budget"), err
    assert code != 0 and len(asked) <= 2
    assert verdict["tokens"]["input"] == 5000
    assert processes_under(sd_home) == []
    catalog = Catalog.open(load_settings().store_url)
    record = catalog.get_session(verdict["session_id"])
    assert record.status == "budget_exceeded" and record.final_text == "WORKED-SO-FAR"


def test_codex_runs_on_a_responses_provider(
    sd_home: Path, workdir: Path, with_runner: Callable[[str], Path]
) -> None:
    with_runner("codex")
    codex = KINDS[2]
    with _fake([_answer("explore")]) as fake:
        write_provider(
            sd_home, "rp", fake.openai_base_url, kind="openai-responses", needs_key=True,
            runner="codex", model=codex.model,
        )  # fmt: skip
        assert run_cli(sd_home, "key", "set", "rp", stdin_text=KEY + "\n").code == 0
        code, _, verdict, err = _dispatch(sd_home, workdir, "explore")
        assert (code, verdict["verdict"]) == (0, "completed"), err
        assert verdict["result"] == RESULT_EXAMPLES["explore"][0]
        assert {r.path for r in fake.requests} == {"/v1/responses"}
        assert all(_key_seen(r) for r in fake.requests)
