"""Every mode through the CLI against the fake server: a valid result, a malformed one the
model corrects, and none; then resumes of the code sessions, which ran in worktrees.

The commands run in this process through the CLI's own entry point (argument parsing, the
stdout guard, exit codes): a subprocess per case would spend most of the suite importing.
Process boundaries (signals, killed workers, fanout) are tested in the sibling files.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.fake_llm import FakeLLM
from tests.conftest import CliResult, write_provider

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


@contextlib.contextmanager
def _captured_fds() -> Iterator[dict[int, str]]:
    """Point fds 1 and 2 at temp files (what a real process would print); yields their text,
    filled in on exit."""
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    text: dict[int, str] = {}
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        files = {1: out, 2: err}
        streams = (sys.stdout, sys.stderr)
        try:
            for fd, f in files.items():
                os.dup2(f.fileno(), fd)
            # pytest's capture replaces sys.stdout; a real process would write to the fds.
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
            yield text
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdout, sys.stderr = streams
            for fd, old in saved.items():
                os.dup2(old, fd)
                os.close(old)
            for fd, f in files.items():
                f.seek(0)
                text[fd] = f.read().decode("utf-8", errors="replace")


def invoke(home: Path, *args: str) -> CliResult:
    """Run `swarmdeck ARGS` through its entry point, in this process."""
    from swarmdeck.cli.app import main

    old_argv, old_home = sys.argv, os.environ.get("SWARMDECK_HOME")
    sys.argv = ["swarmdeck", *args]
    os.environ["SWARMDECK_HOME"] = str(home)
    code = 0
    with _captured_fds() as text:
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.argv = old_argv
            if old_home is None:
                os.environ.pop("SWARMDECK_HOME", None)
            else:
                os.environ["SWARMDECK_HOME"] = old_home
    return CliResult(code, text[1], text[2])


MODES = ("explore", "test", "review", "code")
CASES = ("valid", "corrected", "none")

VALID: dict[str, dict[str, Any]] = {m: RESULT_EXAMPLES[m][0] for m in MODES}
VALID["code"] = {**RESULT_EXAMPLES["code"][0], "files_changed": ["NOTES.md"]}
INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "explore": ({"facts": [{"fact": "x"}], "truncated": False}, "result.facts[0].file_line"),
    "test": ({**VALID["test"], "passed": "41"}, "result.passed"),
    "review": (
        {**VALID["review"], "severity_counts": {"high": 1, "medium": 1, "low": 0}},
        "result.severity_counts.high",
    ),
    "code": ({**VALID["code"], "status": "done"}, "result.status"),
}
RESUMED = {**VALID["code"], "files_changed": ["NOTES.md", "MORE.md"]}
NONE_TEXT = "I had a look around and have nothing to report."
# A model that never calls tools: a long, plausible answer, and no result.
PROSE = "I looked at the project and made the change you asked for. " * 5
PROSE_MODES = ("test", "code")


def submit(result: dict[str, Any], text: str = "Submitting.") -> dict[str, Any]:
    return {
        "text": text,
        "tool_calls": [{"name": "submit_result", "arguments": {"result": result}}],
    }


def first_turn(mode: str) -> dict[str, Any]:
    if mode == "code":
        call = {"name": "write_file", "arguments": {"path": "NOTES.md", "content": "notes\n"}}
    else:
        call = {"name": "read_file", "arguments": {"path": "app.py"}}
    return {"text": "Looking first.", "tool_calls": [call]}


def resume_turns(case: str) -> list[dict[str, Any]]:
    write = {"name": "write_file", "arguments": {"path": "MORE.md", "content": "more\n"}}
    if case == "valid":
        return [{"text": "Continuing.", "tool_calls": [write]}, submit(RESUMED)]
    if case == "corrected":
        return [submit({**RESUMED, "status": "finished"}), submit(RESUMED)]
    return [{"text": NONE_TEXT}]


def scenario(mode: str, case: str) -> dict[str, Any]:
    if case == "valid":
        turns = [first_turn(mode), submit(VALID[mode])]
    elif case == "corrected":
        turns = [submit(INVALID[mode][0]), submit(VALID[mode], "Fixed.")]
    else:
        turns = [{"text": NONE_TEXT}]
    if mode == "code":  # the same conversation continues when the session is resumed
        turns += resume_turns(case)
    return {"match": f"CASE-{mode}-{case}", "turns": turns}


SCRIPT = {
    "scenarios": [scenario(m, c) for m in MODES for c in CASES]
    + [
        {
            "match": "CASE-explore-malformed",
            "turns": [submit(INVALID["explore"][0]) for _ in range(3)],
        }
    ]
    + [{"match": f"CASE-{m}-prose", "turns": [{"text": PROSE}]} for m in PROSE_MODES]
}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    ).stdout


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Every mode and case dispatched, then the code sessions resumed."""
    root = tmp_path_factory.mktemp("modes")
    home = root / "home"
    home.mkdir()
    repo = root / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("def main():\n    return 42\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "init")
    with FakeLLM(SCRIPT) as fake:
        write_provider(home, "fake", fake.openai_base_url)
        runs: dict[str, CliResult] = {}
        names = [(m, c) for m in MODES for c in CASES] + [("explore", "malformed")]
        names += [(m, "prose") for m in PROSE_MODES]
        for mode, case in names:
            args = ["dispatch", "--provider", "fake", "--mode", mode, "--workdir", str(repo)]
            args += ["--task", f"CASE-{mode}-{case}: do the {mode} task.", "--quiet"]
            runs[f"{mode}-{case}"] = invoke(
                home, *args, *(["--worktree"] if mode == "code" else [])
            )
        verdicts = {name: json.loads(res.stdout.splitlines()[-1]) for name, res in runs.items()}
        first_requests = fake.requests
        fake.reset_stats()
        resumed = {}
        for case in CASES:
            sid = verdicts[f"code-{case}"]["session_id"]
            res = invoke(
                home, "dispatch", "--provider", "fake", "--mode", "resume", "--session", sid,
                "--task", f"Now also write MORE.md ({case}).", "--quiet",
            )  # fmt: skip
            runs[f"resume-{case}"] = res
            resumed[f"resume-{case}"] = json.loads(res.stdout.splitlines()[-1])
        yield {
            "home": home,
            "repo": repo,
            "runs": runs,
            "verdicts": verdicts,
            "first_requests": first_requests,
            "resumed": resumed,
            "resume_requests": fake.requests,
        }


def test_two_lines_and_exit_codes(world: dict[str, Any]) -> None:
    for name, res in world["runs"].items():
        started, verdict = (json.loads(line) for line in res.stdout.splitlines())
        assert started["type"] == "swarmdeck.started" and verdict["type"] == "swarmdeck.verdict"
        assert (
            res.code == verdict["exit_code"] == (0 if verdict["verdict"] == "completed" else 3)
        ), name
        assert started["run_id"] == verdict["run_id"] and not verdict["synthesized"]


@pytest.mark.parametrize("mode", MODES)
def test_valid_result(world: dict[str, Any], mode: str) -> None:
    v = world["verdicts"][f"{mode}-valid"]
    assert (v["verdict"], v["parse_state"], v["exit_code"]) == ("completed", "parsed", 0)
    assert v["result"] == VALID[mode] and v["parse_error"] is None and v["stderr_tail"] is None
    assert v["steps"] == 2 and v["mode"] == mode and v["model"] == "fake:scripted"
    assert v["step_cap"] == (120 if mode in ("code", "review") else 80)
    assert v["tokens"]["input"] > 0 and v["tool_errors"] == {"permission_denied": 0, "other": 0}
    verdict_file = Path(v["log_path"]).with_name("verdict.json")
    assert json.loads(verdict_file.read_text())["session_id"] == v["session_id"]
    assert oct(verdict_file.stat().st_mode & 0o777) == "0o600"
    assert Path(v["final_text_path"]).read_text() == "Submitting."


@pytest.mark.parametrize("mode", MODES)
def test_malformed_result_corrected_by_the_model(world: dict[str, Any], mode: str) -> None:
    v = world["verdicts"][f"{mode}-corrected"]
    assert (v["verdict"], v["parse_state"], v["result"]) == ("completed", "parsed", VALID[mode])
    # The model was shown the validation error, naming the path that failed.
    seen = [
        json.dumps(r.body)
        for r in world["first_requests"]
        if f"CASE-{mode}-corrected" in json.dumps(r.body)
    ]
    assert any(f"result rejected: {INVALID[mode][1]}" in body for body in seen), seen[-1][-600:]


@pytest.mark.parametrize("mode", MODES)
def test_no_result(world: dict[str, Any], mode: str) -> None:
    v = world["verdicts"][f"{mode}-none"]
    assert (v["verdict"], v["parse_state"], v["result"], v["exit_code"]) == (
        "empty",
        "unavailable",
        None,
        3,
    )
    assert "nothing was submitted" in v["parse_error"]
    assert Path(v["final_text_path"]).read_text() == NONE_TEXT
    assert v["stderr_tail"] and len(v["stderr_tail"].encode()) <= 500


def test_result_still_malformed_after_three_tries(world: dict[str, Any]) -> None:
    v = world["verdicts"]["explore-malformed"]
    assert (v["parse_state"], v["result"], v["reason"]) == ("malformed", None, "result_malformed")
    assert (v["verdict"], v["exit_code"], world["runs"]["explore-malformed"].code) == (
        "malformed",
        3,
        3,
    )
    assert v["parse_error"].startswith("result.facts[0].file_line:") and v["steps"] == 3
    events = [json.loads(line) for line in Path(v["events_path"]).read_text().splitlines()]
    answers = [
        e["payload"]["content"]
        for e in events
        if e["kind"] == "tool_result" and e["payload"]["name"] == "submit_result"
    ]
    assert len(answers) == 3
    assert "call submit_result again (2 tries left)" in answers[0]
    assert "call submit_result again (1 try left)" in answers[1]
    # The last rejection ends the run: it must not invite another try.
    assert "call submit_result again" not in answers[2]
    assert "not accepted, and the run ends" in answers[2]


@pytest.mark.parametrize("mode", PROSE_MODES)
def test_long_prose_without_a_result_is_unstructured(world: dict[str, Any], mode: str) -> None:
    v = world["verdicts"][f"{mode}-prose"]
    assert (v["verdict"], v["parse_state"], v["result"], v["exit_code"]) == (
        "unstructured",
        "unavailable",
        None,
        3,
    )
    assert world["runs"][f"{mode}-prose"].code == 3 and v["schema_version"] == "3"
    assert Path(v["final_text_path"]).read_text() == PROSE and v["stderr_tail"]


def test_code_jobs_ran_in_their_own_worktrees(world: dict[str, Any]) -> None:
    repo: Path = world["repo"]
    workdirs = {world["verdicts"][f"code-{c}"]["workdir"] for c in CASES}
    assert len(workdirs) == 3 and str(repo) not in workdirs
    assert all(Path(w).parent == world["home"] / "worktrees" for w in workdirs)
    assert (Path(world["verdicts"]["code-valid"]["workdir"]) / "NOTES.md").read_text() == "notes\n"
    assert not (repo / "NOTES.md").exists()


@pytest.mark.parametrize("case", CASES)
def test_resume_continues_the_code_session(world: dict[str, Any], case: str) -> None:
    code = world["verdicts"][f"code-{case}"]
    v = world["resumed"][f"resume-{case}"]
    assert v["session_id"] == code["session_id"] and v["workdir"] == code["workdir"]
    assert v["run_id"] == f"{code['session_id']}.r1" and v["mode"] == "resume"
    if case == "none":
        assert (v["verdict"], v["parse_state"]) == ("empty", "unavailable")
        return
    assert (v["verdict"], v["parse_state"], v["result"]) == ("completed", "parsed", RESUMED)
    assert v["steps"] == 2  # this run's turns only
    assert (Path(v["workdir"]) / "MORE.md").exists() == (case == "valid")
    # The model saw the earlier conversation and the new instruction.
    last = json.dumps(
        [r.body for r in world["resume_requests"] if f"CASE-code-{case}" in json.dumps(r.body)][-1]
    )
    assert f"Now also write MORE.md ({case})" in last
    if case == "valid":
        assert "Looking first." in last
    if case == "corrected":
        assert "result rejected: result.status" in last


def test_worktrees_listed_and_removal_guarded(world: dict[str, Any]) -> None:
    home: Path = world["home"]
    listing = json.loads(invoke(home, "maintain", "worktrees", "ls", "--json").stdout)
    dirty = {w["path"] for w in listing if w["unintegrated"]}
    assert world["verdicts"]["code-valid"]["workdir"] in dirty  # it wrote NOTES.md and MORE.md
    assert world["verdicts"]["code-none"]["workdir"] not in dirty  # it wrote nothing
    target = world["verdicts"]["code-valid"]["workdir"]
    refused = invoke(home, "maintain", "worktrees", "rm", target)
    assert refused.code == 2 and "uncommitted changes" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and Path(target).exists()
