"""Codex CLI (the pinned npm version) runs `codex exec --json` against the fake LLM's
Responses API, with the recipe of docs/runners.md: a per-run CODEX_HOME whose 0600
config.toml holds the provider and its bearer token, so the key is in neither argv nor
the environment of any Codex process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.errors import ConfigError
from swarmdeck.runners import install
from swarmdeck.testing.fake_llm import FakeLLM

KEY = "sk-codex-fake-7d1e40b2"
RUN_TIMEOUT_S = 120
CONFIG = """\
model = "fake-model"
model_provider = "fake"
approval_policy = "never"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false

[model_providers.fake]
name = "fake"
base_url = "{base_url}"
wire_api = "responses"
experimental_bearer_token = "{key}"
"""


@pytest.fixture(scope="module")
def codex(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned Codex, installed once for this module into a home of its own."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not on PATH: runner codex cannot be installed here")
    home = tmp_path_factory.mktemp("sdhome")
    try:
        state = install.install(home, "codex")
    except ConfigError as exc:
        pytest.skip(f"runner codex cannot be installed here: {exc.one_line()}")
    assert state.binary is not None
    return state.binary


@dataclass(frozen=True)
class CodexRun:
    """One run's directory: CODEX_HOME, HOME, TMPDIR and the workdir under it."""

    root: Path
    binary: Path

    @property
    def workdir(self) -> Path:
        return self.root / "work"

    def env(self) -> dict[str, str]:
        """Nothing of the test's environment: no key, no home of the user's. TMPDIR is the
        run's own: under the system's temp dir Codex refuses to set up the helper its
        sandbox runs commands through."""
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.root / "home"),
            "CODEX_HOME": str(self.root / "codex"),
            "TMPDIR": str(self.root / "tmp"),
        }

    def argv(self, *args: str) -> list[str]:
        return [str(self.binary), "exec", "--json", "--skip-git-repo-check", *args]

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args),
            cwd=self.workdir,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, *args: str) -> list[dict[str, Any]]:
        """Run to the end; its JSON event lines (exit 0 asserted)."""
        done = subprocess.run(
            self.argv(*args),
            cwd=self.workdir,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return events(done.stdout)


@pytest.fixture
def codex_run(codex: Path, tmp_path: Path, fake_llm: FakeLLM) -> Iterator[CodexRun]:
    """A run directory whose config points Codex at the fake server."""
    for name in ("codex", "home", "tmp", "work"):
        (tmp_path / name).mkdir(mode=0o700)
    config = tmp_path / "codex" / "config.toml"
    config.write_text(CONFIG.format(base_url=fake_llm.openai_base_url, key=KEY))
    config.chmod(0o600)
    yield CodexRun(tmp_path, codex)


def events(stdout: str) -> list[dict[str, Any]]:
    """The JSON lines Codex printed."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def items(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The completed items of one type."""
    return [e["item"] for e in lines if e["type"] == "item.completed" and e["item"]["type"] == kind]


def descendants(pid: int) -> list[int]:
    """`pid` and every process under it, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def wait_for_request(fake: FakeLLM, proc: subprocess.Popen[str]) -> None:
    """Until Codex's first request reached the fake server (which then holds its answer)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not fake.requests:
        assert proc.poll() is None, f"codex exited early: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "codex sent no request"
        time.sleep(0.05)


def test_codex_answers_from_the_fake_server_with_the_key_in_no_argv_or_env(
    codex_run: CodexRun, fake_llm: FakeLLM
) -> None:
    # The scripted delay keeps Codex waiting on its request while its processes are read;
    # the scenario is found by the task, which Codex sends after its environment context.
    scenarios = [
        {"match": "say pong", "turns": [{"text": "PONG from fake", "delay": 2}]},
        {"turns": [{"text": "the task did not match"}]},
    ]
    fake_llm.set_script({"scenarios": scenarios})
    proc = codex_run.start("--sandbox", "read-only", "say pong")
    try:
        wait_for_request(fake_llm, proc)
        pids = descendants(proc.pid)
        seen = []
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            seen.append(cmdline.split(b"\0")[0])
            assert KEY.encode() not in cmdline, f"key in argv of {cmdline!r}"
            assert KEY.encode() not in environ, f"key in environment of {cmdline!r}"
        # The node launcher and the native binary it starts were both looked at.
        assert any(arg.endswith(b"/codex") and b"vendor" in arg for arg in seen), seen
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    lines = events(stdout)
    assert lines[0]["type"] == "thread.started" and lines[0]["thread_id"]
    assert [m["text"] for m in items(lines, "agent_message")] == ["PONG from fake"]
    usage = lines[-1]["usage"]
    assert lines[-1]["type"] == "turn.completed" and usage["input_tokens"] > 0
    request = fake_llm.requests[0]
    assert (request.path, request.headers["authorization"]) == ("/v1/responses", f"Bearer {KEY}")
    assert request.body["stream"] is True and request.body["store"] is False
    assert (codex_run.root / "codex" / "config.toml").stat().st_mode & 0o777 == 0o600


def test_a_scripted_shell_call_runs_and_its_output_goes_back(
    codex_run: CodexRun, fake_llm: FakeLLM
) -> None:
    command = "echo codex-ran > proof.txt; cat proof.txt"
    turns = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": command}}]},
        {"text": "Saw: {{last_tool_result}}"},
    ]
    fake_llm.set_script({"scenarios": [{"turns": turns}]})
    lines = codex_run.run("--sandbox", "danger-full-access", "make proof")
    [ran] = items(lines, "command_execution")
    assert ran["command"].endswith(f"'{command}'")
    assert (ran["exit_code"], ran["aggregated_output"]) == (0, "codex-ran\n")
    assert (codex_run.workdir / "proof.txt").read_text() == "codex-ran\n"
    sent_back = fake_llm.requests[-1].body["input"][-1]
    assert (sent_back["type"], sent_back["call_id"]) == ("function_call_output", "call_0_0")
    assert "codex-ran" in sent_back["output"]
    [answer] = items(lines, "agent_message")
    assert answer["text"].startswith("Saw: ") and "codex-ran" in answer["text"]


def test_read_only_leaves_the_workdir_unwritten(codex_run: CodexRun, fake_llm: FakeLLM) -> None:
    turns = [
        {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "echo x > made.txt"}}]},
        {"text": "tried"},
    ]
    fake_llm.set_script({"scenarios": [{"turns": turns}]})
    lines = codex_run.run("--sandbox", "read-only", "write a file")
    assert [m["text"] for m in items(lines, "agent_message")] == ["tried"]
    assert len(fake_llm.requests) == 2
    assert not (codex_run.workdir / "made.txt").exists()


def test_exec_resume_continues_the_thread_with_its_history(
    codex_run: CodexRun, fake_llm: FakeLLM
) -> None:
    fake_llm.set_script({"scenarios": [{"turns": [{"text": "first"}, {"text": "second"}]}]})
    first = codex_run.run("--sandbox", "read-only", "task one")
    thread = first[0]["thread_id"]
    again = codex_run.run("--sandbox", "read-only", "resume", thread, "task two")
    assert again[0] == {"type": "thread.started", "thread_id": thread}
    assert [m["text"] for m in items(again, "agent_message")] == ["second"]
    history = fake_llm.requests[-1].body["input"]
    said = [(i["role"], i["content"][0]["text"]) for i in history if i.get("type") == "message"]
    assert said[-3:] == [("user", "task one"), ("assistant", "first"), ("user", "task two")]
    assert os.listdir(codex_run.root / "codex" / "sessions")
