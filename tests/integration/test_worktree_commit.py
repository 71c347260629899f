"""In a git worktree under the sandbox, a code-mode shell can commit; a read-only mode cannot."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from swarmdeck.tools.base import ToolContext
from swarmdeck.tools.builtins.shell import SHELL_TOOL
from swarmdeck.tools.sandbox import detect_sandbox
from swarmdeck.workspace.gitdirs import git_dirs_outside

pytestmark = pytest.mark.sandbox


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(
        repo,
        "-c",
        "user.email=t@t",
        "-c",
        "user.name=t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "root",
    )
    tree = tmp_path / "tree"
    _git(repo, "worktree", "add", "-q", "--detach", str(tree))
    return tree


def test_git_dirs_of_a_worktree(worktree: Path, tmp_path: Path) -> None:
    dirs = git_dirs_outside(worktree)
    assert (tmp_path / "repo" / ".git").resolve() in dirs
    assert any(".git/worktrees" in str(d) for d in dirs)
    assert git_dirs_outside(tmp_path / "repo") == []


@pytest.mark.skipif(detect_sandbox().kind != "bwrap", reason="bubblewrap is not available")
@pytest.mark.parametrize(("mode", "commits"), [("code", True), ("explore", False)])
async def test_commit_in_worktree(worktree: Path, tmp_path: Path, mode: str, commits: bool) -> None:
    (worktree / "f.txt").write_text("x\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ctx = ToolContext(
        "s1",
        worktree,
        mode,
        run_dir,
        services={"extra_writable": git_dirs_outside(worktree) if mode == "code" else []},
    )
    argv = [
        "git",
        "-c",
        "user.email=w@w",
        "-c",
        "user.name=w",
        "commit",
        "-q",
        "-m",
        "work",
        "--allow-empty",
    ]
    outcome = await SHELL_TOOL.call(ctx, __import__("json").dumps({"argv": argv}))
    log = _git(worktree, "log", "--oneline")
    assert ("work" in log) is commits, outcome.content
