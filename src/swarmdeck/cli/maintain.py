"""`swarmdeck maintain logs|runs|worktrees`: clean up what runs leave behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from swarmdeck.cli.app import app
from swarmdeck.cli.dispatch import HumanCommand

maintain_app = typer.Typer(
    help="Clean up old logs, run directories and worktrees.", no_args_is_help=True
)
app.add_typer(maintain_app, name="maintain")
worktrees_app = typer.Typer(help="List and remove the worktrees runs made.", no_args_is_help=True)
maintain_app.add_typer(worktrees_app, name="worktrees")

OlderOpt = Annotated[
    float, typer.Option("--older-than-days", min=0, help="Only what is older than this.")
]
KeepOpt = Annotated[int, typer.Option("--keep", min=0, help="Always keep the newest M runs.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Say what would go; remove nothing.")]


def _clean(kind: str, older_than_days: float, keep: int, dry_run: bool) -> None:
    from swarmdeck.cli.sessions import open_catalog
    from swarmdeck.config import load_settings
    from swarmdeck.dispatch.maintenance import clean_logs, clean_runs, live_session_ids

    settings = load_settings()
    live = live_session_ids(open_catalog())
    clean = clean_logs if kind == "logs" else clean_runs
    report = clean(settings.runs_dir, older_than_days, keep, live, dry_run)
    print(report.summary("log files" if kind == "logs" else "run directories", dry_run))


@maintain_app.command("logs", cls=HumanCommand)
def logs(older_than_days: OlderOpt, keep: KeepOpt = 0, dry_run: DryRunOpt = False) -> None:
    """Remove the logs of runs older than N days; verdicts and final texts stay."""
    _clean("logs", older_than_days, keep, dry_run)


@maintain_app.command("runs", cls=HumanCommand)
def runs(older_than_days: OlderOpt, keep: KeepOpt = 0, dry_run: DryRunOpt = False) -> None:
    """Remove whole run directories older than N days (never those of live sessions)."""
    _clean("runs", older_than_days, keep, dry_run)


def _worktrees_dir() -> Path:
    from swarmdeck.config import load_settings
    from swarmdeck.dispatch.plan import WORKTREES_DIR

    return load_settings().home / WORKTREES_DIR


@worktrees_app.command("ls", cls=HumanCommand)
def list_worktrees(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
) -> None:
    """The worktrees runs made, and whether removing each would lose work."""
    from dataclasses import asdict

    from swarmdeck.workspace.worktrees import list_worktrees as listing

    found = listing(_worktrees_dir())
    if as_json:
        print(json.dumps([asdict(w) for w in found]))
        return
    if not found:
        print("no worktrees")
        return
    for w in found:
        state = f"NOT INTEGRATED: {w.unintegrated}" if w.unintegrated else "integrated"
        session = f" · session {w.session_id}" if w.session_id else ""
        print(f"{w.path}  ({w.repo}{session})  {state}")


@worktrees_app.command("rm", cls=HumanCommand)
def remove_worktree(
    path: Annotated[Path, typer.Argument(help="The worktree to remove.")],
    force: Annotated[
        bool, typer.Option("--force", help="Remove even with work not integrated.")
    ] = False,
) -> None:
    """Remove a worktree; refuses uncommitted work or commits on no branch (unless --force)."""
    from swarmdeck.workspace.worktrees import remove_worktree as remove

    remove(path, _worktrees_dir(), force=force)
    print(f"removed {path}")


# The old names, kept working but out of the help: every group says `ls` and `rm`.
worktrees_app.command("list", cls=HumanCommand, hidden=True)(list_worktrees)
worktrees_app.command("remove", cls=HumanCommand, hidden=True)(remove_worktree)
