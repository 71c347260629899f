"""A store workspace on the host that runs its session (workspace/modes.py): materialised
as of the last journaled step, and snapshotted after every step that may change files,
keyed to that step's journal entry.

A `shared` session is left as it is: a worker that cannot see its path refuses it
(session.py).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import SessionRecord
from swarmdeck.errors import UsageError
from swarmdeck.runtime.services import services
from swarmdeck.workspace.modes import SUBMITTED_KEY, cache_of, tree_dir, workspace_id

# The ref recorded when a host restored an earlier snapshot than the latest.
RESTORED_PREFIX = "restored:"


def store_workspace(session_id: str) -> str | None:
    """The id of the session's store workspace; None for a shared one (its identity is
    cached while it runs: a shared session costs no thread hop and no read here)."""
    return workspace_id(services().session_identity(session_id).options)


def in_store(session_id: str) -> bool:
    """Whether the session keeps its workspace in the store (see store_workspace)."""
    return store_workspace(session_id) is not None


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
    journaled step in this host's tree dir (written anew: no half-step survives), and the
    session's identity pointed there (its tools and prompt see the local path). A shared
    session is returned as it is."""
    svc = services()
    record = svc.session_identity(session_id)
    ws_id = workspace_id(record.options)
    if ws_id is None:
        return record
    local = tree_dir(svc.settings, ws_id)
    commit = journaled_ref(svc.catalog, session_id, ws_id)
    cache_of(svc.settings).materialise(ws_id, commit, local, svc.catalog, clean=True)
    if svc.catalog.latest_ref(ws_id) != commit:
        # A snapshot whose step never reached the journal was passed over: the workspace's
        # current files (`sessions pull`, delivery) are the restored ones from now on.
        svc.catalog.put_ref(ws_id, f"{RESTORED_PREFIX}{time.time_ns()}", commit)
    moved = replace(record, workdir=str(local))
    svc.pin_identity(moved)
    return moved


def release(ws_id: str) -> None:
    """After its session ended here: remove this host's copy of a store workspace's files
    (the store keeps them; a resume writes them anew). The workspace's small git dir stays:
    its index speeds up the next capture of the same directory. Given the workspace, not
    the session: the session's end dropped its cached identity, which a read would fetch
    again only to find the same workspace."""
    shutil.rmtree(tree_dir(services().settings, ws_id), ignore_errors=True)


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
