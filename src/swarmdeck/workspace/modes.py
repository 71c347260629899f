"""Where a session's files live: `store` (captured into the store at submission; each
host that runs the session works on its own copy) or `shared` (every worker runs it in
the path it was submitted in). The option's shape and the capture at submission, light
enough for dispatch's fleet path (no SQLAlchemy: the store is any PackStore)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from swarmdeck.config import Settings
from swarmdeck.errors import UsageError
from swarmdeck.workspace.packstore import PackStore
from swarmdeck.workspace.snapshots import WorkspaceCache
from swarmdeck.workspace.worktrees import git

# The session option: "store" on a request, {"mode": "store", "id": ...} once captured.
WORKSPACE_OPTION = "workspace"
STORE = "store"
SHARED = "shared"
MODES = (STORE, SHARED)
# Picks the mode for a submission that names none.
WORKSPACE_ENV = "SWARMDECK_WORKSPACE"
# The ref a workspace starts with: the files as submitted.
SUBMITTED_KEY = "submitted"
# Where a host keeps the files of the store workspaces it runs (under its own home).
TREES = "trees"


def requested_mode(options: dict[str, Any]) -> str | None:
    """The workspace mode a request asks for: its option, else $SWARMDECK_WORKSPACE, else
    None (the submitter chooses: see choose_mode); UsageError for anything else."""
    raw = options.get(WORKSPACE_OPTION)
    if isinstance(raw, dict):
        raw = raw.get("mode")
    mode = raw or os.environ.get(WORKSPACE_ENV) or None
    if mode is not None and mode not in MODES:
        raise UsageError(
            f"unknown workspace mode {mode!r}",
            f"use --workspace store or --workspace shared ({WORKSPACE_ENV} takes the same)",
        )
    return mode


def choose_mode(options: dict[str, Any], other_hosts: bool) -> str:
    """The mode a new session gets: the one asked for, else store when a dispatch is
    handed to a fleet with workers on other hosts (they could not see this host's path;
    its changes come back as a branch), else shared (one machine: the session edits the
    directory in place, as it always did)."""
    return requested_mode(options) or (STORE if other_hosts else SHARED)


def workspace_id(options: dict[str, Any]) -> str | None:
    """The store workspace of a session's options, or None (shared)."""
    raw = options.get(WORKSPACE_OPTION)
    if isinstance(raw, dict) and raw.get("mode") == STORE:
        return str(raw["id"])
    return None


def cache_of(settings: Settings) -> WorkspaceCache:
    """This host's workspace cache (under its home)."""
    return WorkspaceCache(settings.workspaces_dir)


def tree_dir(settings: Settings, ws_id: str) -> Path:
    """Where this host materialises a store workspace."""
    return settings.workspaces_dir / TREES / ws_id


def child_options(
    settings: Settings, store: PackStore, parent: dict[str, Any], child_id: str
) -> dict[str, Any]:
    """The workspace option of a sub-agent of a store session: its own workspace, captured
    from the parent's copy on this host as it is now ({} for a shared parent). The child
    never works in the submitter's path, and its changes stay in its own workspace."""
    ws_id = workspace_id(parent)
    if ws_id is None:
        return {}
    source = tree_dir(settings, ws_id)
    options = with_workspace({WORKSPACE_OPTION: STORE}, False, settings, store, source, child_id)
    return {WORKSPACE_OPTION: options[WORKSPACE_OPTION]}


def with_workspace(
    options: dict[str, Any],
    other_hosts: bool,
    settings: Settings,
    store: PackStore,
    workdir: Path,
    session_id: str,
) -> dict[str, Any]:
    """A new session's options; with a store workspace, its workdir captured first and
    the option naming the snapshot (and the repository to deliver the changes to)."""
    if choose_mode(options, other_hosts) != STORE:
        return options
    cache = cache_of(settings)
    commit = cache.record(session_id, SUBMITTED_KEY, workdir, store, never=[settings.home])
    captured = {"mode": STORE, "id": session_id, "base": commit, **repo_at(workdir)}
    return {**options, WORKSPACE_OPTION: captured}


def repo_at(workdir: Path) -> dict[str, str]:
    """The git repository the workdir is in, for delivering the session's changes back:
    its top, its HEAD then, and the workdir's place in it ({} outside a repository or
    before its first commit)."""
    out = git(workdir, "rev-parse", "--show-toplevel", "HEAD", check=False).split("\n")
    if len(out) < 2 or not re.fullmatch(r"[0-9a-f]{40,64}", out[1]):
        return {}
    top = Path(out[0]).resolve()
    prefix = Path(workdir).resolve().relative_to(top).as_posix()
    return {"repo": str(top), "head": out[1], "prefix": "" if prefix == "." else prefix + "/"}
