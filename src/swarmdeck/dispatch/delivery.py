"""The end of a dispatch whose session kept its workspace in the store: its changes come
back to the planner's host, as a branch `swarmdeck/<run>` in the planner's repository or
(`--deliver patch`, or outside a repository) as a patch file in the run's directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.config import Settings
from swarmdeck.dispatch.verdict import Delivered
from swarmdeck.workspace.delivery import changes, write_branch, write_patch
from swarmdeck.workspace.modes import STORE, WORKSPACE_OPTION, cache_of
from swarmdeck.workspace.packstore import PackStore
from swarmdeck.workspace.worktrees import GitError

BRANCH = "branch"
PATCH = "patch"
DELIVER_KINDS = (BRANCH, PATCH)
BRANCH_PREFIX = "swarmdeck/"


def deliver(
    record: SessionRecord,
    catalog: PackStore,
    settings: Settings,
    run_id: str,
    kind: str,
    patch_path: Path,
) -> Delivered | None:
    """Deliver the session's changes since submission; None for a shared workspace or
    when the session changed nothing."""
    option: Any = record.options.get(WORKSPACE_OPTION)
    if not isinstance(option, dict) or option.get("mode") != STORE:
        return None
    final = catalog.latest_ref(option["id"])
    if final is None or final == option["base"]:
        return None
    cache = cache_of(settings)
    found = changes(cache, catalog, option["base"], final)
    files = sorted(c.path for c in found)
    if not found:
        return None
    repo = Path(option.get("repo") or "")
    if kind == BRANCH and option.get("head") and repo.is_dir():
        branch = BRANCH_PREFIX + run_id
        message = f"swarmdeck: run {run_id}\n\n{record.title or record.task[:200]}\n"
        try:
            write_branch(cache, found, repo, option["head"], option["prefix"], branch, message)
            return Delivered(kind=BRANCH, branch=branch, repo=str(repo), files=files)
        except GitError as exc:
            note = f"no branch: {exc.message}"
    else:
        note = None if kind == PATCH else "no branch: the workdir was not in a git repository"
    write_patch(cache, option["base"], final, patch_path)
    return Delivered(kind=PATCH, patch_path=str(patch_path), files=files, note=note)
