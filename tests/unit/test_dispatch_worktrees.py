"""Worktrees with real git: creation from HEAD, dirty trees, listing and safe removal."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from swarmdeck.errors import TaskRefusedError, UsageError
from swarmdeck.workspace.worktrees import (
    check_clean,
    create_worktree,
    list_worktrees,
    remove_worktree,
)

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(cwd: Path, *args: str) -> str:
    import os

    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "init")
    return root


def test_create_from_head_in_the_same_subdirectory(repo: Path, tmp_path: Path) -> None:
    trees = tmp_path / "home" / "worktrees"
    tree = create_worktree(repo / "pkg", trees, "code")
    assert Path(tree.path).parent == trees and tree.workdir == str(Path(tree.path) / "pkg")
    assert (Path(tree.workdir) / "mod.py").read_text() == "x = 1\n"
    assert git(Path(tree.path), "rev-parse", "HEAD").strip() == tree.base
    assert "HEAD" in git(Path(tree.path), "status", "-b", "--porcelain")  # detached
    [listed] = list_worktrees(trees)
    assert listed.unintegrated is None and listed.repo == str(repo)


def test_dirty_tree_is_refused_naming_files(repo: Path, tmp_path: Path) -> None:
    (repo / "pkg" / "mod.py").write_text("x = 2\n")
    (repo / "new.txt").write_text("n\n")
    with pytest.raises(TaskRefusedError) as err:
        check_clean(repo)
    assert "pkg/mod.py" in err.value.message and "new.txt" in err.value.message
    with pytest.raises(UsageError, match="not in one"):
        check_clean(tmp_path)


def test_removal_refuses_work_that_is_not_integrated(repo: Path, tmp_path: Path) -> None:
    trees = tmp_path / "home" / "worktrees"
    path = Path(create_worktree(repo, trees).path)
    (path / "pkg" / "mod.py").write_text("x = 3\n")
    with pytest.raises(TaskRefusedError, match=r"uncommitted changes: pkg/mod\.py"):
        remove_worktree(path, trees)
    git(path, "commit", "-qam", "work")
    with pytest.raises(TaskRefusedError, match="not on any branch"):
        remove_worktree(path, trees)
    assert list_worktrees(trees)[0].unintegrated
    git(path, "branch", "feature")  # integrated: the commit is on a branch of the repo
    remove_worktree(path, trees)
    assert not path.exists() and list_worktrees(trees) == []
    assert "feature" in git(repo, "branch")


def test_force_and_foreign_paths(repo: Path, tmp_path: Path) -> None:
    trees = tmp_path / "home" / "worktrees"
    path = Path(create_worktree(repo, trees).path)
    (path / "scratch.txt").write_text("s")
    remove_worktree(path, trees, force=True)
    assert not path.exists()
    with pytest.raises(UsageError, match="not a swarmdeck worktree"):
        remove_worktree(repo, trees)
