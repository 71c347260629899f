"""A code dispatch with `--workspace store` works on its own copy and delivers its changes
to the planner's repository as a branch `swarmdeck/<run>` (or a patch file); the
planner's work tree, index and HEAD are left alone. Real CLI, fake LLM over HTTP, git."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.testing.script import Reply
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import Agent, Scripted, call

RESULT = {
    "status": "complete",
    "files_changed": ["app.py", "lib/new.py", "README.md"],
    "validation": {"commands": [], "passed": True},
    "reuse": "nothing to reuse",
    "remaining_risks": "none known",
}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _repo(root: Path) -> Path:
    root.mkdir()
    _git(root, "init", "-q")
    (root / "app.py").write_text("def main():\n    return 42\n")
    (root / "README.md").write_text("# project\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "first")
    (root / "scratch.txt").write_text("untracked, never part of the branch\n")
    return root


def _script(fake_llm: Any) -> None:
    edit = call("write_file", path="app.py", content="def main():\n    return 43\n")
    new = call("write_file", path="lib/new.py", content="X = 1\n")
    rm = call("shell", argv=["rm", "README.md"])
    submit = call("submit_result", result=RESULT)
    fake_llm.set_script(
        Scripted(
            {
                "return 43": Agent(
                    [
                        Reply(tool_calls=(edit, new)),
                        Reply(tool_calls=(rm,)),
                        Reply(text="Done.", tool_calls=(submit,)),
                    ]
                )
            }
        )
    )


def _dispatch(sd_home: Path, repo: Path, *extra: str) -> tuple[Any, dict[str, Any]]:
    res = run_cli(
        sd_home, "dispatch", "--provider", "fake", "--mode", "code", "--workdir", str(repo),
        "--task", "make main return 43", "--quiet", "--no-sandbox", "--workspace", "store",
        *extra, timeout=120,
    )  # fmt: skip
    return res, json.loads(res.stdout.splitlines()[-1])


def test_a_code_dispatch_delivers_a_branch_to_the_planners_repo(
    store: Store, sd_home: Path, tmp_path: Path, fake_llm: Any
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    _script(fake_llm)
    repo = _repo(tmp_path / "repo")
    head = _git(repo, "rev-parse", "HEAD").strip()
    status = _git(repo, "status", "--porcelain")
    res, verdict = _dispatch(sd_home, repo)
    assert res.code == 0, res.stderr
    delivered = verdict["delivered"]
    branch = f"swarmdeck/{verdict['run_id']}"
    assert delivered["kind"] == "branch" and delivered["branch"] == branch
    assert delivered["files"] == ["README.md", "app.py", "lib/new.py"]
    # The planner's tree, index and HEAD are as they were; the work is on the branch.
    assert _git(repo, "rev-parse", "HEAD").strip() == head
    assert _git(repo, "status", "--porcelain") == status
    assert (repo / "app.py").read_text() == "def main():\n    return 42\n"
    assert _git(repo, "rev-parse", f"{branch}^").strip() == head
    assert _git(repo, "show", f"{branch}:app.py") == "def main():\n    return 43\n"
    names = _git(repo, "ls-tree", "-r", "--name-only", branch).split()
    assert names == ["app.py", "lib/new.py"]  # README removed, scratch.txt never added


def test_deliver_patch_writes_a_patch_that_applies(
    sd_home: Path, tmp_path: Path, fake_llm: Any
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    _script(fake_llm)
    repo = _repo(tmp_path / "repo")
    res, verdict = _dispatch(sd_home, repo, "--deliver", "patch")
    assert res.code == 0, res.stderr
    delivered = verdict["delivered"]
    assert delivered["kind"] == "patch" and delivered["branch"] is None
    assert _git(repo, "branch", "--list", "swarmdeck/*") == ""
    _git(repo, "apply", delivered["patch_path"])
    assert (repo / "app.py").read_text() == "def main():\n    return 43\n"
    assert (repo / "lib" / "new.py").read_text() == "X = 1\n"
    assert not (repo / "README.md").exists()


@pytest.mark.parametrize("flag", ["--deliver", "--workspace"])
def test_bad_values_are_one_line_errors(
    sd_home: Path, tmp_path: Path, flag: str, fake_llm: Any
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    repo = _repo(tmp_path / "repo")
    res = run_cli(
        sd_home, "dispatch", "--provider", "fake", "--mode", "code", "--workdir", str(repo),
        "--task", "x", flag, "nfs",
    )  # fmt: skip
    assert res.code == 2
    error = json.loads(res.stdout.splitlines()[-1])
    assert flag.lstrip("-") in error["error"] and fake_llm.requests == []
