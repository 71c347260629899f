"""`swarmdeck sessions pull`: write a session's workspace, as the store keeps it, to a
directory on this host."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from swarmdeck.cli.sessions import SessionIdArg, open_catalog, sessions_app
from swarmdeck.config import load_settings
from swarmdeck.errors import UsageError


@sessions_app.command("pull")
def pull(
    session_id: SessionIdArg,
    directory: Annotated[
        Path | None,
        typer.Argument(
            metavar="DIR",
            help="A new or empty directory (default: ./<session id>).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write a session's current workspace (its latest snapshot in the store) to DIR.

    Works on any host that shares the store, for sessions submitted with
    --workspace store."""
    from swarmdeck.workspace.modes import cache_of, workspace_id

    catalog = open_catalog()
    sid = catalog.resolve_session_id(session_id)
    record = catalog.get_session(sid)
    ws_id = workspace_id(record.options)
    commit = catalog.latest_ref(ws_id) if ws_id else None
    if commit is None:
        raise UsageError(
            f"session {sid} keeps no workspace in the store: it works in {record.workdir}",
            "only sessions submitted with --workspace store can be pulled",
        )
    target = directory if directory is not None else Path.cwd() / sid
    cache_of(load_settings()).export(commit, target, catalog)
    print(f"session {sid}: workspace {commit[:12]} written to {target}", file=sys.stderr)
