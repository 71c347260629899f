"""A hostile repository: its config names programs (a file system monitor, clean and smudge
filters, a text converter, an external diff, a post-checkout hook, a gpg) that git would
run on its own. Neither swarmdeck's own git (worktrees, the dirty check every swarm makes)
nor a read-only mode's git runs any of them; each would leave a marker file."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from swarmdeck.errors import PermissionDeniedError
from swarmdeck.tools.builtins.shell import SHELL_TOOL
from swarmdeck.workspace.worktrees import (
    check_clean,
    create_worktree,
    dirty_files,
    list_worktrees,
    remove_worktree,
)
from tests.integration.sandboxes import call, sandbox_kind, tool_ctx

__all__ = ["sandbox_kind"]

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
PROGRAMS = ("fsmonitor", "clean", "smudge", "process", "textconv", "extdiff", "hook", "gpg")


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env
    ).stdout


def _program(bin_dir: Path, name: str, markers: Path, body: str = "") -> str:
    """A script that leaves markers/<name> and then does what git expects of it."""
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\ntouch "{markers}/{name}"\n{body}\n')
    path.chmod(0o755)
    return str(path)


def make_hostile(root: Path, markers: Path, bin_dir: Path) -> Path:
    """A committed repository whose .git/config and .gitattributes run every program."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    markers.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / ".gitattributes").write_text(
        "*.txt filter=ev diff=tc\n*.bin diff=ext\n*.dat filter=pr\n"
    )
    (root / "a.txt").write_text("one\n")
    (root / "b.bin").write_text("two\n")
    (root / "c.dat").write_text("three\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "init")
    # Signed, so that showing it runs gpg to verify it.
    signer = bin_dir / "sign"
    signer.write_text(
        "#!/bin/sh\ncat >/dev/null\necho '[GNUPG:] SIG_CREATED ' >&2\n"
        "printf -- '-----BEGIN PGP SIGNATURE-----\\nx\\n-----END PGP SIGNATURE-----\\n'\n"
    )
    signer.chmod(0o755)
    git(root, "-c", f"gpg.program={signer}", "commit", "-q", "-S", "--allow-empty", "-m", "2")
    config = {
        "core.fsmonitor": _program(bin_dir, "fsmonitor", markers),
        "filter.ev.clean": _program(bin_dir, "clean", markers, "cat"),
        "filter.ev.smudge": _program(bin_dir, "smudge", markers, "cat"),
        "filter.ev.required": "true",
        # A long-running filter: its marker is enough, git then fails the checkout.
        "filter.pr.process": _program(bin_dir, "process", markers),
        "diff.tc.textconv": _program(bin_dir, "textconv", markers, 'cat "$1"'),
        "diff.ext.command": _program(bin_dir, "extdiff", markers),
        "log.showSignature": "true",
        "gpg.program": _program(bin_dir, "gpg", markers),
    }
    for key, value in config.items():
        git(root, "config", key, value)
    hooks = root / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "post-checkout").write_text(Path(_program(bin_dir, "hook", markers)).read_text())
    (hooks / "post-checkout").chmod(0o755)
    return root


def touch_all(tree: Path) -> None:
    """Same content, new mtime: git must read the files (through the clean filter)."""
    later = time.time() + 5
    for name in ("a.txt", "b.bin", "c.dat"):
        os.utime(tree / name, (later, later))


def ran(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    markers = tmp_path / "markers"
    return make_hostile(tmp_path / "repo", markers, tmp_path / "bin"), markers


def test_plain_git_runs_the_repos_programs(hostile: tuple[Path, Path], tmp_path: Path) -> None:
    """The control: the fixture is live, so an empty marker dir below means something."""
    repo, markers = hostile
    touch_all(repo)
    subprocess.run(["git", "status"], cwd=repo, capture_output=True, check=False)
    subprocess.run(["git", "log", "-p", "-2"], cwd=repo, capture_output=True)
    subprocess.run(["git", "diff", EMPTY_TREE, "HEAD"], cwd=repo, capture_output=True)
    # Without the process filter, which fails the checkout before the hook runs.
    subprocess.run(
        ["git", "-c", "filter.pr.process=", "worktree", "add", "--detach", str(tmp_path / "wt")],
        cwd=repo,
        capture_output=True,
    )
    assert ran(markers) == sorted(PROGRAMS)


def test_swarmdecks_own_git_runs_none_of_them(hostile: tuple[Path, Path], tmp_path: Path) -> None:
    repo, markers = hostile
    touch_all(repo)
    assert check_clean(repo) == repo.resolve()  # the dirty check a swarm makes
    trees = tmp_path / "home" / "worktrees"
    tree = create_worktree(repo, trees, "code")
    path = Path(tree.path)
    assert (path / "a.txt").read_text() == "one\n"  # checked out without the smudge filter
    touch_all(path)
    assert dirty_files(path) == []
    (path / "a.txt").write_text("changed\n")
    assert dirty_files(path) == ["a.txt"]
    [listed] = list_worktrees(trees)
    assert listed.unintegrated
    remove_worktree(path, trees, force=True)
    assert not path.exists()
    assert ran(markers) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["git", "status"],
        ["git", "diff"],
        ["git", "diff", EMPTY_TREE, "HEAD"],
        ["git", "log", "-p", "-2"],
        ["git", "show", "HEAD~1"],
        ["git", "log", "--format=%G?", "-1"],
        ["git", "blame", "a.txt"],
        ["git", "-C", ".", "status"],
    ],
)
async def test_read_only_git_runs_none_of_them(
    tmp_path: Path, sandbox_kind: str, argv: list[str]
) -> None:
    if sandbox_kind == "none":
        pytest.skip("a read-only mode has no shell without a sandbox")
    # Markers in the run's own tmp dir: writable inside every sandbox, so a program that
    # ran would leave one there whatever the sandbox.
    run_dir = tmp_path / "run"
    markers = run_dir / "tmp" / "markers"
    repo = make_hostile(tmp_path / "repo", markers, run_dir / "tmp" / "bin")
    touch_all(repo)
    outcome = await call(SHELL_TOOL, tool_ctx(repo, run_dir, "explore"), argv=argv)
    assert "exit_code: 0" in outcome.content, outcome.content
    assert ran(markers) == []


def test_the_users_own_filters_still_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter set up in the user's global config (as `git lfs install` does) is the
    user's: a worktree checkout still smudges through it, unless the repo redefines it."""
    markers, bin_dir = tmp_path / "markers", tmp_path / "bin"
    repo = make_hostile(tmp_path / "repo", markers, bin_dir)
    git(repo, "config", "--remove-section", "filter.ev")
    user = tmp_path / "gitconfig"
    user.write_text(
        f'[filter "ev"]\n\tsmudge = {_program(bin_dir, "user-smudge", markers, "cat")}\n'
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(user))
    create_worktree(repo, tmp_path / "trees", "code")
    assert ran(markers) == ["user-smudge"]
    (markers / "user-smudge").unlink()
    git(repo, "config", "filter.ev.process", _program(bin_dir, "process", markers))
    create_worktree(repo, tmp_path / "trees", "code")
    assert ran(markers) == []


def test_a_filter_that_cannot_be_switched_off_is_refused(hostile: tuple[Path, Path]) -> None:
    repo, markers = hostile
    git(repo, "config", "filter.a=b.clean", "x")
    with pytest.raises(PermissionDeniedError, match="filter named 'a=b'"):
        check_clean(repo)
    assert ran(markers) == []


def _with_hostile_submodule(tmp_path: Path, markers: Path, bin_dir: Path) -> Path:
    """A clean repository whose submodule's own config names a clean filter."""
    sub = tmp_path / "sub-origin"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    (sub / ".gitattributes").write_text("*.txt filter=sf\n")
    (sub / "s.txt").write_text("sub\n")
    git(sub, "add", ".")
    git(sub, "commit", "-q", "-m", "sub")
    repo = tmp_path / "super"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    git(repo, "commit", "-q", "-m", "with sub")
    bin_dir.mkdir(parents=True, exist_ok=True)
    markers.mkdir(parents=True, exist_ok=True)
    clean = _program(bin_dir, "sub-clean", markers, "cat")
    git(repo / "sub", "config", "filter.sf.clean", clean)
    later = time.time() + 5
    os.utime(repo / "sub" / "s.txt", (later, later))
    return repo


def test_a_submodules_own_filter_runs_only_when_git_goes_into_it(tmp_path: Path) -> None:
    """The control for the next test: git status goes into a submodule to see whether it
    is dirty, and there runs the filter the submodule's config names."""
    markers = tmp_path / "markers"
    repo = _with_hostile_submodule(tmp_path, markers, tmp_path / "bin")
    subprocess.run(["git", "status", "--ignore-submodules=dirty"], cwd=repo, capture_output=True)
    assert ran(markers) == []
    subprocess.run(["git", "status"], cwd=repo, capture_output=True)
    assert ran(markers) == ["sub-clean"]


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["git", "status"], False),
        (["git", "diff"], False),
        (["git", "status", "--ignore-submodules=none"], True),
        (["git", "diff", "--submodule=diff"], True),
        (["git", "grep", "--recurse-submodules", "sub"], True),
    ],
)
async def test_read_only_git_does_not_go_into_a_hostile_submodule(
    tmp_path: Path, sandbox_kind: str, argv: list[str], refused: bool
) -> None:
    if sandbox_kind == "none":
        pytest.skip("a read-only mode has no shell without a sandbox")
    run_dir = tmp_path / "run"
    markers = run_dir / "tmp" / "markers"
    repo = _with_hostile_submodule(tmp_path, markers, run_dir / "tmp" / "bin")
    outcome = await call(SHELL_TOOL, tool_ctx(repo, run_dir, "explore"), argv=argv)
    if refused:
        assert outcome.permission_denied and "runs git in submodules" in outcome.content
    else:
        assert "exit_code: 0" in outcome.content, outcome.content
    assert ran(markers) == []
