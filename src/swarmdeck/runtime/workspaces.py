"""A session's workspace in the store (`--workspace store`): captured at submission,
materialised on whichever host runs the session, snapshotted after every step that may
change files, keyed to that step's journal entry.

`shared` (the default) keeps the old way: every worker runs the session in the path it
was submitted in, and one that cannot see it refuses the session (session.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import SessionRecord
from swarmdeck.config import Settings
from swarmdeck.errors import UsageError
from swarmdeck.runtime.services import services
from swarmdeck.workspace.snapshots import WorkspaceCache
from swarmdeck.workspace.worktrees import git

# The session option: "store" on a request, {"mode": "store", "id": ...} once captured.
WORKSPACE_OPTION = "workspace"
STORE = "store"
SHARED = "shared"
MODES = (STORE, SHARED)
# Picks the mode for a submission that names none (a fleet's hosts share only the store).
WORKSPACE_ENV = "SWARMDECK_WORKSPACE"
# The ref a workspace starts with: the files as submitted.
SUBMITTED_KEY = "submitted"
# Where a host keeps the files of the store workspaces it runs (under its own home).
TREES = "trees"


def requested_mode(options: dict[str, Any]) -> str:
    """The workspace mode a request asks for: its option, else $SWARMDECK_WORKSPACE,
    else shared; UsageError for anything else."""
    raw = options.get(WORKSPACE_OPTION)
    if isinstance(raw, dict):
        raw = raw.get("mode")
    mode = raw or os.environ.get(WORKSPACE_ENV) or SHARED
    if mode not in MODES:
        raise UsageError(
            f"unknown workspace mode {mode!r}",
            f"use --workspace store or --workspace shared ({WORKSPACE_ENV} takes the same)",
        )
    return mode


def workspace_id(options: dict[str, Any]) -> str | None:
    """The store workspace of a session's options, or None (shared)."""
    raw = options.get(WORKSPACE_OPTION)
    if isinstance(raw, dict) and raw.get("mode") == STORE:
        return str(raw["id"])
    return None


def cache_of(settings: Settings) -> WorkspaceCache:
    """This host's workspace cache (under its home)."""
    return WorkspaceCache(settings.workspaces_dir)


def capture_submission(
    settings: Settings, catalog: Catalog, workdir: Path, session_id: str
) -> dict[str, Any]:
    """Capture a new session's workdir into the store; the option value that names it."""
    cache = cache_of(settings)
    commit = cache.record(session_id, SUBMITTED_KEY, workdir, catalog, never=[settings.home])
    return {"mode": STORE, "id": session_id, "base": commit, **repo_at(workdir)}


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


def tree_dir(settings: Settings, ws_id: str) -> Path:
    """Where this host materialises a store workspace."""
    return settings.workspaces_dir / TREES / ws_id


def journaled_ref(catalog: Catalog, session_id: str, ws_id: str) -> str:
    """The workspace's commit as of the session's last journaled step: a snapshot whose
    step never reached the journal (a crash in between) is passed over."""
    journal = services().journal(session_id, fresh=True)
    for step_key, commit in reversed(catalog.refs_of(ws_id)):
        if step_key == SUBMITTED_KEY or journal.get(step_key) is not None:
            return commit
    raise UsageError(
        f"session {session_id} has no workspace snapshot in the store",
        "submit it again with --workspace store",
    )


def materialise(session_id: str) -> SessionRecord:
    """On the host about to run a store-workspace session: its files as of the last
    journaled step in this host's tree dir, and the session's identity pointed there (its
    tools and prompt see the local path). A shared session is returned as it is."""
    svc = services()
    record = svc.session_identity(session_id)
    ws_id = workspace_id(record.options)
    if ws_id is None:
        return record
    local = tree_dir(svc.settings, ws_id)
    commit = journaled_ref(svc.catalog, session_id, ws_id)
    cache_of(svc.settings).materialise(ws_id, commit, local, svc.catalog, clean=True)
    moved = replace(record, workdir=str(local))
    svc.pin_identity(moved)
    return moved


def snapshot_step(session_id: str, step_key: str) -> str | None:
    """After a step that may have changed files: record the workspace under the step's
    journal key (before the step's entry lands). None for a shared workspace."""
    svc = services()
    record = svc.session_identity(session_id)
    ws_id = workspace_id(record.options)
    if ws_id is None:
        return None
    cache = cache_of(svc.settings)
    return cache.record(
        ws_id, step_key, Path(record.workdir), svc.catalog, never=[svc.settings.home]
    )
