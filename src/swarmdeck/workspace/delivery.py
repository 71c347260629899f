"""Bring a store workspace's changes home: a branch in the submitter's repository, or a
patch file.

The changes are those between the snapshot taken at submission and the latest one, so a
file that was untracked when the task was submitted is not delivered unless the session
changed it. The branch's commit has the repository's HEAD at submission as its parent;
the repository's work tree, index and HEAD are never touched (plumbing only, on a
temporary index), and git runs no program the repository's config names.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from swarmdeck.workspace.packstore import PackStore
from swarmdeck.workspace.safegit import no_program_options
from swarmdeck.workspace.snapshots import WorkspaceCache, clean_env, run_git

ZERO = "0" * 40
GITLINK = "160000"


@dataclass(frozen=True)
class Change:
    """One path the session changed: its new mode and blob (None when it was deleted)."""

    path: str
    mode: str
    blob: str | None


def changes(cache: WorkspaceCache, store: PackStore, base: str, final: str) -> list[Change]:
    """What changed between two snapshots of a workspace (fetched here if need be)."""
    cache.fetch(base, store)
    cache.fetch(final, store)
    out = cache.shared_git("diff-tree", "-r", "-z", "--no-renames", base, final)
    fields = out.split(b"\0")
    found: list[Change] = []
    # -z prints `:oldmode newmode oldsha newsha status NUL path NUL` per entry.
    for meta, raw_path in zip(fields[0::2], fields[1::2], strict=False):
        if not meta.startswith(b":"):
            continue
        _, new_mode, _, new_sha, status = meta[1:].decode().split(" ")
        deleted = status == "D"
        found.append(Change(raw_path.decode(), new_mode, None if deleted else new_sha))
    return found


def write_patch(cache: WorkspaceCache, base: str, final: str, path: Path) -> None:
    """A patch (`git apply`-able, binary files included) from one snapshot to the other."""
    data = cache.shared_git("diff", "--binary", "--no-renames", "--no-color", base, final)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _repo_git(repo: Path, *args: str, stdin: bytes = b"", index: Path | None = None) -> bytes:
    """Run git in the user's repository, running no program its config names."""
    env = clean_env(**({"GIT_INDEX_FILE": str(index)} if index is not None else {}))
    return run_git([*no_program_options(repo), *args], repo, env, stdin)


def write_branch(
    cache: WorkspaceCache,
    found: list[Change],
    repo: Path,
    head: str,
    prefix: str,
    branch: str,
    message: str,
) -> str:
    """Commit the changes on top of `head` in `repo` (paths under `prefix`, the workdir's
    place in it) as a new branch; its commit id. GitError if the branch exists."""
    blobs = sorted({c.blob for c in found if c.blob and c.mode != GITLINK})
    if blobs:
        pack = cache.shared_git("pack-objects", "--stdout", "-q", stdin="\n".join(blobs).encode())
        _repo_git(repo, "index-pack", "--stdin", stdin=pack)
    lines = []
    for change in found:
        path = prefix + change.path
        if change.blob is None:
            lines.append(f"0 {ZERO}\t{path}")
        else:
            lines.append(f"{change.mode} {change.blob}\t{path}")
    with tempfile.TemporaryDirectory(prefix="swarmdeck-deliver-") as tmp:
        index = Path(tmp) / "index"
        _repo_git(repo, "read-tree", head, index=index)
        info = "".join(f"{line}\0" for line in lines).encode()
        _repo_git(repo, "update-index", "-z", "--index-info", stdin=info, index=index)
        tree = _repo_git(repo, "write-tree", index=index).decode().strip()
    commit = _repo_git(repo, "commit-tree", tree, "-p", head, "-m", message).decode().strip()
    # Create only: an existing branch of that name is never moved.
    _repo_git(repo, "update-ref", f"refs/heads/{branch}", commit, ZERO)
    return commit
