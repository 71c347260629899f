"""Where a worktree's git data lives: outside the worktree, in the main repository."""

from __future__ import annotations

from pathlib import Path


def git_dirs_outside(workdir: Path) -> list[Path]:
    """The git dirs a commit in `workdir` writes to that lie outside it (none for a plain repo).

    A linked worktree has a `.git` file naming its own git dir (index, HEAD) under the main
    repository's `.git/worktrees/`, and shares the main `.git` (objects, refs) with it.
    """
    marker = workdir / ".git"
    if not marker.is_file():
        return []
    text = marker.read_text(encoding="utf-8", errors="replace").strip()
    if not text.startswith("gitdir:"):
        return []
    own = (workdir / text.removeprefix("gitdir:").strip()).resolve()
    dirs = [own]
    common_file = own / "commondir"
    if common_file.is_file():
        dirs.append((own / common_file.read_text().strip()).resolve())
    return [d for d in dirs if d.is_dir() and not d.is_relative_to(workdir.resolve())]
