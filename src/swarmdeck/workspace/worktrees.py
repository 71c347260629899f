"""Detached git worktrees for code runs, under `<home>/worktrees/`; list and safe removal."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from swarmdeck.errors import NotFoundError, SwarmdeckError, TaskRefusedError, UsageError
from swarmdeck.workspace.safegit import no_program_options

META_DIR = ".meta"
GIT_TIMEOUT_S = 60
SHOWN_DIRTY = 10


class GitError(SwarmdeckError):
    """A git command failed."""


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """Run git in `cwd`, running no program the repository's config names, and return its
    stdout; GitError (one line) when it fails."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        proc = subprocess.run(
            ["git", *no_program_options(cwd), *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise GitError("git is not installed", "install git to use --worktree") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {args[0]} timed out in {cwd}") from None
    if check and proc.returncode != 0:
        detail = " ".join(proc.stderr.split())[:300] or f"exit code {proc.returncode}"
        raise GitError(f"git {' '.join(args[:2])} failed in {cwd}: {detail}")
    return proc.stdout


def repo_root(path: Path) -> Path:
    """The top of the git work tree that holds `path`."""
    if not path.is_dir():
        raise UsageError(f"workdir does not exist: {path}", "pass an existing directory")
    out = git(path, "rev-parse", "--show-toplevel", check=False).strip()
    if not out:
        raise UsageError(
            f"--worktree needs a git repository, and {path} is not in one",
            "run without --worktree, or `git init` and commit first",
        )
    return Path(out).resolve()


def dirty_files(tree: Path) -> list[str]:
    """Paths with uncommitted changes (untracked included), as git status names them."""
    # On the command line, because .gitmodules can undo the config's setting: a dirty
    # submodule would have git run git in it, with its own config.
    out = git(
        tree,
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=normal",
        "--ignore-submodules=dirty",
    )
    entries = [e for e in out.split("\0") if e]
    files: list[str] = []
    skip_next = False
    for entry in entries:
        if skip_next:  # the source path of a rename
            skip_next = False
            continue
        status, path = entry[:2], entry[3:]
        skip_next = "R" in status or "C" in status
        files.append(path)
    return files


def describe_dirty(files: list[str]) -> str:
    """`a.py, b.py (+3 more)`."""
    shown = ", ".join(files[:SHOWN_DIRTY])
    more = len(files) - SHOWN_DIRTY
    return shown + (f" (+{more} more)" if more > 0 else "")


def check_clean(workdir: Path) -> Path:
    """The repo root of `workdir`; TaskRefusedError naming the dirty files when it is dirty."""
    root = repo_root(workdir)
    dirty = dirty_files(root)
    if dirty:
        raise TaskRefusedError(
            f"the work tree has uncommitted changes: {describe_dirty(dirty)}",
            "commit or stash them first: the worktree is made from HEAD and would not have them",
        )
    if not git(root, "rev-parse", "--verify", "--quiet", "HEAD", check=False).strip():
        raise UsageError(f"{root} has no commit yet", "commit once, then use --worktree")
    return root


@dataclass(frozen=True)
class Worktree:
    """A worktree swarmdeck made: where it is, where it came from, and from which commit."""

    path: str
    repo: str
    base: str
    workdir: str
    created_at: float
    session_id: str | None = None


def _meta_path(worktrees_dir: Path, path: Path) -> Path:
    return worktrees_dir / META_DIR / f"{path.name}.json"


def create_worktree(workdir: Path, worktrees_dir: Path, label: str = "run") -> Worktree:
    """A detached worktree of HEAD; the run's workdir is the same subdirectory inside it."""
    workdir = workdir.resolve()
    root = check_clean(workdir)
    base = git(root, "rev-parse", "HEAD").strip()
    worktrees_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = f"{root.name}-{label}-{secrets.token_hex(3)}"
    path = worktrees_dir / name
    git(root, "worktree", "add", "--detach", str(path), base)
    rel = workdir.relative_to(root)
    tree = Worktree(
        path=str(path),
        repo=str(root),
        base=base,
        workdir=str(path / rel),
        created_at=time.time(),
    )
    save_meta(worktrees_dir, tree)
    return tree


def save_meta(worktrees_dir: Path, tree: Worktree) -> None:
    """Remember where a worktree came from (outside it, so it stays clean)."""
    meta = _meta_path(worktrees_dir, Path(tree.path))
    meta.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    meta.write_text(json.dumps(asdict(tree)), encoding="utf-8")


def load_meta(worktrees_dir: Path, path: Path) -> Worktree | None:
    """The stored record of a worktree, or None."""
    try:
        return Worktree(**json.loads(_meta_path(worktrees_dir, path).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def worktree_of_session(worktrees_dir: Path, session_id: str) -> Worktree | None:
    """The worktree made for this session (its stored record names it), or None: what a
    step run again after a crash looks for before it makes another one."""
    folder = worktrees_dir / META_DIR
    if not folder.is_dir():
        return None
    for meta in sorted(folder.glob("*.json")):
        tree = load_meta(worktrees_dir, worktrees_dir / meta.stem)
        if tree is not None and tree.session_id == session_id and Path(tree.path).is_dir():
            return tree
    return None


def merge_command(tree: Worktree) -> str:
    """The shell command that brings a worktree's changes (committed or not, new files
    too) into the repository it was made from, as staged changes there."""
    return (
        f"git -C {shlex.quote(tree.path)} add -A && "
        f"git -C {shlex.quote(tree.path)} diff --cached --binary {tree.base} | "
        f"git -C {shlex.quote(tree.repo)} apply --index"
    )


@dataclass(frozen=True)
class WorktreeStatus:
    """A worktree as `maintain worktrees ls` shows it."""

    path: str
    repo: str | None
    base: str | None
    head: str | None
    dirty: list[str]
    unintegrated: str | None
    session_id: str | None
    created_at: float | None


def unintegrated_reason(path: Path, repo: Path, base: str | None) -> str | None:
    """Why removing this worktree would lose work, or None when it would not."""
    dirty = dirty_files(path)
    if dirty:
        return f"it has uncommitted changes: {describe_dirty(dirty)}"
    head = git(path, "rev-parse", "HEAD").strip()
    if head == base:
        return None
    branches = git(
        repo, "for-each-ref", "--contains", head, "--format=%(refname:short)", "refs/heads"
    ).split()
    if not branches:
        return f"commit {head[:12]} is not on any branch of {repo}"
    return None


def status_of(path: Path, worktrees_dir: Path) -> WorktreeStatus:
    """What a worktree holds and whether removing it would lose work."""
    meta = load_meta(worktrees_dir, path)
    repo = Path(meta.repo) if meta else None
    if repo is None:
        common = git(path, "rev-parse", "--git-common-dir", check=False).strip()
        repo = (path / common).resolve().parent if common else None
    head = git(path, "rev-parse", "HEAD", check=False).strip() or None
    dirty = dirty_files(path) if head else []
    reason = unintegrated_reason(path, repo, meta.base if meta else None) if repo and head else None
    return WorktreeStatus(
        path=str(path),
        repo=str(repo) if repo else None,
        base=meta.base if meta else None,
        head=head,
        dirty=dirty,
        unintegrated=reason,
        session_id=meta.session_id if meta else None,
        created_at=meta.created_at if meta else None,
    )


def list_worktrees(worktrees_dir: Path) -> list[WorktreeStatus]:
    """Every worktree under the home's worktrees dir, oldest first."""
    if not worktrees_dir.is_dir():
        return []
    paths = [p for p in worktrees_dir.iterdir() if p.is_dir() and p.name != META_DIR]
    found = [status_of(p, worktrees_dir) for p in paths]
    return sorted(found, key=lambda s: (s.created_at or 0, s.path))


def remove_worktree(path: Path, worktrees_dir: Path, *, force: bool = False) -> None:
    """Remove a swarmdeck worktree; refuse when it holds work not integrated anywhere."""
    path = path.expanduser().resolve()
    root = worktrees_dir.resolve()
    if path.parent != root:
        raise UsageError(
            f"{path} is not a swarmdeck worktree (those live in {root})",
            "list them with `swarmdeck maintain worktrees ls`",
        )
    meta = load_meta(worktrees_dir, path)
    if not path.exists():
        if meta is None:
            raise NotFoundError(
                f"no worktree at {path}", "list them with `swarmdeck maintain worktrees ls`"
            )
        git(Path(meta.repo), "worktree", "prune", check=False)
        _meta_path(worktrees_dir, path).unlink(missing_ok=True)
        return
    status = status_of(path, worktrees_dir)
    if status.unintegrated and not force:
        raise TaskRefusedError(
            f"refusing to remove {path}: {status.unintegrated}",
            "commit it to a branch of the repo (or pass --force to discard it)",
        )
    if status.repo:
        git(Path(status.repo), "worktree", "remove", "--force", str(path), check=False)
        git(Path(status.repo), "worktree", "prune", check=False)
    if path.exists():
        shutil.rmtree(path)
    _meta_path(worktrees_dir, path).unlink(missing_ok=True)
