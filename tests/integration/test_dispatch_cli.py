"""`dispatch` and `run` through the CLI: the two-line contract, every exit code, timeouts,
interrupts and resume, provider failures, and the small commands around them.

Real processes where the process matters (stdout of a real process, signals); the rest
through the CLI's entry point in this process (see test_dispatch_modes.invoke)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall, Script
from tests.conftest import CliResult, cli_env, in_parallel, run_cli, write_provider
from tests.integration.test_dispatch_modes import invoke

EXPLORE = RESULT_EXAMPLES["explore"][0]
CODE = RESULT_EXAMPLES["code"][0]
# A model that never calls a tool, and answers at length.
PROSE = "main() returns 42, which is what the caller expects; nothing else to change. " * 4
LOOK = {"text": "Looking.", "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}
SCRIPT = Script.from_dict(
    {
        "scenarios": [
            {"match": "SLOW", "turns": [LOOK, {"text": "hmm", "delay": 60}]},
            {"match": "LOOP", "turns": [LOOK, LOOK, LOOK, LOOK]},
            {
                "match": "FAIL",
                "turns": [{"text": "never", "fault": {"status": 500}}],
            },
            {"match": "PROSE", "turns": [{"text": PROSE}]},
            {
                "turns": [
                    LOOK,
                    {
                        "text": "Done.",
                        "tool_calls": [{"name": "submit_result", "arguments": {"result": EXPLORE}}],
                    },
                ]
            },
        ]
    }
)


def script(request: FakeRequest) -> Reply:
    """The scripted scenarios, plus a resumable code task that hangs until it is resumed."""
    if "RESUMABLE" not in request.task:
        return SCRIPT(request)
    resumed = any(
        m.get("role") == "user" and "RESUME NOW" in str(m.get("content")) for m in request.messages
    )
    if resumed:
        return Reply(
            text="Finished.", tool_calls=(ReplyToolCall("submit_result", {"result": CODE}),)
        )
    if request.turn == 0:
        write = ReplyToolCall("write_file", {"path": "half.txt", "content": "half\n"})
        return Reply(text="Starting.", tool_calls=(write,))
    return Reply(text="Thinking hard.", delay=60)


@pytest.fixture
def fake(sd_home: Path):
    with FakeLLM(script) as server:
        write_provider(sd_home, "fake", server.openai_base_url)
        write_provider(sd_home, "flaky", server.openai_base_url, max_attempts=1)
        write_provider(sd_home, "dead", "http://127.0.0.1:9/v1", max_attempts=1)
        write_provider(sd_home, "keyed", server.openai_base_url, needs_key=True)
        yield server


def dispatch(
    home: Path, workdir: Path, *extra: str, task: str = "what does main return?"
) -> CliResult:
    args = ["dispatch", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir)]
    return run_cli(home, *args, "--task", task, *extra, timeout=120)


def lines(res: CliResult) -> list[dict[str, Any]]:
    return [json.loads(line) for line in res.stdout.splitlines()]


def test_two_lines_then_the_files_they_name(sd_home: Path, workdir: Path, fake: FakeLLM) -> None:
    args = ["dispatch", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir)]
    res = run_cli(sd_home, *args, "--task", "what does main return?", timeout=120)
    assert res.code == 0, res.stderr
    started, verdict = lines(res)
    assert started["type"] == "swarmdeck.started" and started["schema_version"] == "3"
    assert {
        "run_id", "session_id", "provider", "model", "mode", "workdir", "timeout_s",
        "idle_timeout_s", "log_path", "events_path",
    } <= set(started)  # fmt: skip
    assert (started["provider"], started["model"], started["workdir"]) == (
        "fake",
        "fake:scripted",
        str(workdir),
    )
    assert verdict["verdict"] == "completed" and verdict["result"] == EXPLORE
    assert verdict["session_id"] == started["session_id"] and verdict["steps"] == 2
    events = [json.loads(x) for x in Path(started["events_path"]).read_text().splitlines()]
    assert [e["kind"] for e in events] == [
        "task",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
        "status",
    ]
    log = Path(started["log_path"])
    assert "read_file" in log.read_text() and oct(log.stat().st_mode & 0o777) == "0o600"
    assert oct(log.with_name("verdict.json").stat().st_mode & 0o777) == "0o600"
    assert "read_file" in res.stderr  # progress went to stderr
    # The adapters' pools were closed on the run's loop: aiohttp reported none unclosed.
    assert "Unclosed" not in res.stderr, res.stderr
    # The mode's tools only, and its prompt, reached the model.
    body = fake.requests[0].body
    assert {t["function"]["name"] for t in body["tools"]} == {
        "read_file",
        "list_dir",
        "glob",
        "grep",
        "shell",
        "submit_result",
    }
    assert "explore mode" in body["messages"][0]["content"]


def test_every_usage_error_is_exit_2_with_one_error_line(
    sd_home: Path, workdir: Path, fake: FakeLLM, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
    }
    (repo / "a.py").write_text("a = 1\n")
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "i"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, env=env, capture_output=True)
    (repo / "a.py").write_text("a = 2\n")
    template = tmp_path / "template.md"
    template.write_text(invoke(sd_home, "template", "explore").stdout)
    base = ["dispatch", "--workdir", str(workdir)]
    cases = {
        "unknown provider": ([*base, "--provider", "nosuch", "--mode", "explore", "--task", "t"], "unknown provider"),
        "missing key": ([*base, "--provider", "keyed", "--mode", "explore", "--task", "t"], "no key for provider keyed"),
        "secret": ([*base, "--provider", "fake", "--mode", "explore", "--task", "use sk-proj-abcdefghijklmnopqrstuvwxyz12"], "credential"),
        "placeholder": ([*base, "--provider", "fake", "--mode", "explore", "--task-file", str(template)], "unfilled template placeholder"),
        "bad option": ([*base, "--provider", "fake", "--mode", "explore", "--task", "t", "--bogus"], "No such option"),
        "bad value": ([*base, "--provider", "fake", "--mode", "explore", "--task", "t", "--timeout", "-1"], "--timeout"),
        "no mode": ([*base, "--provider", "fake", "--task", "t"], "--mode is required"),
        "bad mode": ([*base, "--provider", "fake", "--mode", "agentic", "--task", "t"], "unknown mode"),
        "read-only worktree": ([*base, "--provider", "fake", "--mode", "review", "--task", "t", "--worktree"], "pointless in review mode"),
        "dirty worktree": (["dispatch", "--workdir", str(repo), "--provider", "fake", "--mode", "code", "--task", "t", "--worktree"], "uncommitted changes: a.py"),
        "no session": ([*base, "--provider", "fake", "--mode", "resume", "--task", "t"], "needs --session"),
        "unknown session": ([*base, "--provider", "fake", "--mode", "resume", "--task", "t", "--session", "nope"], "no session nope"),
    }  # fmt: skip
    results = {name: invoke(sd_home, *args) for name, (args, _) in cases.items()}
    # The same from real processes, for two of them.
    real = in_parallel(
        {name: (lambda a=cases[name][0]: run_cli(sd_home, *a)) for name in ("bad option", "secret")}
    )
    results.update({f"{name} (process)": res for name, res in real.items()})
    cases.update({f"{name} (process)": cases[name] for name in real})
    for name, (_, needle) in cases.items():
        res = results[name]
        assert res.code == 2, (name, res.stdout, res.stderr)
        [doc] = lines(res)
        assert doc["type"] == "swarmdeck.error" and needle in doc["error"] + doc["hint"], (
            name,
            doc,
        )
        assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr, name
        assert needle in res.stderr, (name, res.stderr)
    assert fake.requests == []  # nothing was sent to a model


def test_a_long_answer_without_a_result_is_not_completed(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    base = ["--provider", "fake", "--workdir", str(workdir), "--task", "PROSE please"]
    results = in_parallel(
        {
            "dispatch": lambda: run_cli(sd_home, "dispatch", "--mode", "test", *base, timeout=120),
            "run": lambda: run_cli(sd_home, "run", "--mode", "code", *base, timeout=120),
        }
    )
    for name, res in results.items():
        assert res.code == 3, (name, res.stderr)
        v = lines(res)[-1]
        assert (v["verdict"], v["parse_state"], v["result"], v["exit_code"]) == (
            "unstructured",
            "unavailable",
            None,
            3,
        ), name
        assert v["schema_version"] == "3" and Path(v["final_text_path"]).read_text() == PROSE


def test_dry_run_calls_no_model(sd_home: Path, workdir: Path, fake: FakeLLM) -> None:
    res = dispatch(sd_home, workdir, "--dry-run")
    assert res.code == 0
    [doc] = lines(res)
    assert (
        doc["type"] == "swarmdeck.dry_run"
        and doc["step_cap"] == 80
        and doc["model"] == "fake:scripted"
    )
    assert fake.requests == [] and "explore mode" in doc["system_prompt"]


def test_provider_failures_still_print_two_lines(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    base = ["dispatch", "--mode", "explore", "--workdir", str(workdir), "--task", "FAIL now"]
    results = {
        "500": invoke(sd_home, *base, "--provider", "flaky"),
        "unreachable": invoke(sd_home, *base, "--provider", "dead"),
    }
    for name, res in results.items():
        assert res.code == 3, (name, res.stderr)
        _started, verdict = lines(res)
        assert verdict["verdict"] == "error" and verdict["reason"] == "provider_error", name
        assert verdict["parse_state"] == "unavailable" and verdict["stderr_tail"], name
    assert "500" in lines(results["500"])[1]["stderr_tail"]


def test_limits_timeout_idle_timeout_step_cap(sd_home: Path, workdir: Path, fake: FakeLLM) -> None:
    run_args = ["run", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir)]
    # Both limits count from the run's start, process launch included: 2 s was too tight
    # under a loaded CI machine to reach the first tool call (the timeout run's stderr had
    # no read_file), so each gets room for it; the slow turn sleeps 60 s, so both still fire.
    results = {
        "timeout": invoke(sd_home, *run_args, "--task", "SLOW", "--timeout", "6"),
        "idle": dispatch(sd_home, workdir, "--idle-timeout", "4", task="SLOW"),
        "cap": dispatch(sd_home, workdir, "--max-steps", "2", task="LOOP"),
    }
    timed = results["timeout"]
    assert timed.code == 124, timed.stderr
    [verdict] = lines(timed)  # `run` prints only the verdict on stdout
    assert (verdict["verdict"], verdict["timed_out"], verdict["exit_code"]) == ("error", True, 124)
    assert "read_file" in timed.stderr  # human progress on stderr
    idle = results["idle"]
    assert idle.code == 3
    verdict = lines(idle)[1]
    assert (verdict["idle_timed_out"], verdict["timed_out"], verdict["reason"]) == (
        True,
        False,
        "idle_timeout",
    )
    assert verdict["steps"] == 1  # what was done before the timeout is counted
    capped = lines(results["cap"])[1]
    assert (capped["verdict"], capped["steps"], capped["step_cap"]) == ("step_capped_partial", 2, 2)
    assert results["cap"].code == 3


def test_interrupt_then_resume(sd_home: Path, workdir: Path, fake: FakeLLM) -> None:
    args = ["dispatch", "--provider", "fake", "--mode", "code", "--workdir", str(workdir)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", *args, "--task", "RESUMABLE: write half.txt"],
        env=cli_env(sd_home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while len(fake.requests) < 2:  # the second turn is under way (and hangs)
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    _started, verdict = [json.loads(x) for x in out.splitlines()]
    assert (verdict["verdict"], verdict["interrupted"], verdict["reason"]) == (
        "error",
        True,
        "interrupted",
    )
    assert verdict["steps"] == 1 and (workdir / "half.txt").exists()  # what was done so far
    sid = verdict["session_id"]
    resumed = invoke(
        sd_home, "dispatch", "--provider", "fake", "--mode", "resume", "--session", sid, "--task", "RESUME NOW"
    )  # fmt: skip
    assert resumed.code == 0, resumed.stderr
    again, final = lines(resumed)
    assert (
        again["session_id"] == sid
        and again["workdir"] == str(workdir)
        and again["run_id"] == f"{sid}.r1"
    )
    assert (final["verdict"], final["result"], final["steps"]) == ("completed", CODE, 1)
    # The resumed model saw the whole earlier conversation.
    assert "Starting." in json.dumps(fake.requests[-1].body)


def test_small_commands(sd_home: Path, tmp_path: Path) -> None:
    target = tmp_path / "proj" / ".claude"
    results = {
        "template": invoke(sd_home, "template", "review"),
        "bad template": invoke(sd_home, "template", "nope"),
        "init": invoke(sd_home, "init", "claude", "--target", str(target)),
        "logs": invoke(sd_home, "maintain", "logs", "--older-than-days", "30"),
        "runs": invoke(sd_home, "maintain", "runs", "--older-than-days", "30", "--keep", "5"),
        "worktrees": invoke(sd_home, "maintain", "worktrees", "ls"),
    }
    assert results["template"].code == 0 and "<FILL: the files, diff" in results["template"].stdout
    assert results["bad template"].code == 2 and "unknown mode" in results["bad template"].stderr
    assert results["init"].code == 0 and (target / "skills" / "swarmdeck" / "SKILL.md").is_file()
    assert "removed 0" in results["logs"].stdout and "removed 0" in results["runs"].stdout
    assert results["worktrees"].stdout.strip() == "no worktrees"
    again = invoke(sd_home, "init", "claude", "--target", str(target))
    assert again.code == 0 and again.stdout.startswith("updated")
    gone = invoke(sd_home, "uninstall", "claude", "--target", str(target))
    assert gone.code == 0 and not (target / "skills" / "swarmdeck").exists()
