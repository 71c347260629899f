"""`swarmdeck sessions`: list, show, follow and resume sessions from the catalog."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from swarmdeck.catalog.records import STATUSES, SessionRecord
from swarmdeck.cli.app import app
from swarmdeck.config import load_settings
from swarmdeck.errors import UsageError
from swarmdeck.views.figures import TokenFigures
from swarmdeck.views.fleet import ORPHANED, SessionRow, worker_label
from swarmdeck.views.progress import ProgressPrinter
from swarmdeck.views.text import age

if TYPE_CHECKING:
    from swarmdeck.catalog.catalog import Catalog
    from swarmdeck.catalog.workers import WorkerRegistry
    from swarmdeck.cli.following import Followed

SessionIdArg = Annotated[str, typer.Argument(help="Session id (a unique prefix is enough).")]

sessions_app = typer.Typer(help="List, inspect, follow and resume sessions.", no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")

STATUS_STYLE = {
    ORPHANED: "bold red",
    "completed": "green",
    "failed": "red",
    "cancelled": "dim",
    "budget_exceeded": "red",
    "running": "yellow",
    "waiting": "cyan",
    "idle": "cyan",
    "input_required": "bold magenta",
}
IDS_NOTE = "ids are shortest unique prefixes: every command takes one (`--json` has the full ids)"
# Beside the status of a session warned that a budget covering it is 80 % spent.
BUDGET_MARK = "⚠"
BUDGET_NOTE = f"{BUDGET_MARK}: 80 % of a budget covering the session was spent (it was warned)"


def open_catalog() -> Catalog:
    """The catalog alone, without launching the engine (fast, read-mostly commands)."""
    from swarmdeck.catalog.catalog import Catalog
    from swarmdeck.secrets.redact import load_redactor
    from swarmdeck.secrets.store import CredentialStore

    settings = load_settings()
    redactor = load_redactor(CredentialStore(settings.credentials_dir))
    return Catalog.open(settings.store_url, redactor.redact)


def worker_registry(catalog: Catalog) -> WorkerRegistry:
    """The fleet's registry of executors, as this host's settings see it."""
    from swarmdeck.catalog.workers import WorkerRegistry

    settings = load_settings()
    return WorkerRegistry(catalog.engine, settings.hostname, settings.lease_seconds)


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _title(s: SessionRecord) -> str:
    text = s.title or s.task
    flat = " ".join(text.split())
    return flat[:60] + ("…" if len(flat) > 60 else "")


def _status_cell(row: SessionRow, now: float) -> str:
    left = row.seconds_left(now)
    shown = row.status + (f" {left:.0f}s" if left is not None else "")
    style = STATUS_STYLE.get(row.status, "")
    cell = f"[{style}]{shown}[/]" if style else shown
    if row.budget_warning and row.stored_status != "budget_exceeded":
        cell += f" [bold yellow]{BUDGET_MARK}[/]"
    return cell


@sessions_app.command("ls")
def ls(
    status: Annotated[
        str | None,
        typer.Option(
            help=f"Only sessions with this status: {', '.join((*STATUSES, ORPHANED))} "
            "(orphaned: its worker died and no one has taken it over yet)."
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="How many, newest first.")] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
) -> None:
    """List sessions, newest first; ids are shortest unique prefixes, never cut."""
    from swarmdeck.views.fleet import FleetView

    listable = (*STATUSES, ORPHANED)
    if status is not None and status not in listable:
        raise UsageError(f"unknown status {status!r}", f"use one of: {', '.join(listable)}")
    catalog = open_catalog()
    view = FleetView(catalog, worker_registry(catalog))
    rows = view.newest(limit, status)
    if as_json:
        print(json.dumps([r.summary() for r in rows], ensure_ascii=False))
        return
    if not rows:
        empty = f"no {status} sessions" if status else "no sessions yet — try `swarmdeck demo`"
        Console(stderr=True).print(empty)
        return
    prefixes = view.prefixes()
    now = time.time()
    cells = {
        "id": [r.prefix for r in rows],
        "status": [_status_cell(r, now) for r in rows],
        "model": [r.model for r in rows],
        "turns": [str(r.turns) for r in rows],
        "tokens": [f"{r.tokens:,}" for r in rows],
        "cost": [f"${r.cost_usd:.4f}" if r.cost_usd is not None else "" for r in rows],
        "worker": [worker_label(r.worker) for r in rows],
        "parent": [prefixes.get(r.parent_id, r.parent_id) if r.parent_id else "" for r in rows],
        "age": [age(now - r.created_at) for r in rows],
        "title": [r.title for r in rows],
    }
    console = Console()
    shown = _columns_that_fit(cells, console.width)
    table = Table(box=None, header_style="bold")
    for col in shown:
        if col == "title":
            table.add_column(col, no_wrap=True, overflow="ellipsis", ratio=1, min_width=10)
        else:
            # The width of its widest cell: an id, above all, is never cut.
            wide = max(len(Text.from_markup(c).plain) for c in [col, *cells[col]])
            numeric = col in ("turns", "tokens", "cost")
            table.add_column(
                col, no_wrap=True, min_width=wide, justify="right" if numeric else "left"
            )
    for n in range(len(rows)):
        table.add_row(*(cells[col][n] for col in shown))
    console.print(table)
    # Printed on its own, the note wraps between words (as a caption it was cut mid-word).
    console.print(IDS_NOTE, soft_wrap=False)
    if any(r.budget_warning and r.stored_status != "budget_exceeded" for r in rows):
        console.print(BUDGET_NOTE, soft_wrap=False)


# Dropped first when the terminal is narrow; id, status, age and title always stay.
OPTIONAL_COLUMNS = ("parent", "worker", "cost", "tokens", "turns", "model")
# A title keeps up to this many characters before the optional columns stay.
TITLE_ROOM = 40


def _columns_that_fit(cells: dict[str, list[str]], width: int) -> list[str]:
    """The columns to print at this width, in order: the optional ones go first."""
    wide = {
        col: max(len(Text.from_markup(c).plain) for c in [col, *values]) + 2
        for col, values in cells.items()
    }
    shown = list(cells)
    title = min(wide["title"], TITLE_ROOM)
    for col in OPTIONAL_COLUMNS:
        if sum(wide[c] for c in shown if c != "title") + title <= width:
            break
        shown.remove(col)
    return shown


@sessions_app.command("show")
def show(
    session_id: SessionIdArg,
    as_json: Annotated[
        bool, typer.Option("--json", help="The record and transcript as JSON.")
    ] = False,
) -> None:
    """Show a session's record and its transcript."""
    from swarmdeck.views.detail import context_line, session_detail

    catalog = open_catalog()
    d = session_detail(catalog, worker_registry(catalog), catalog.resolve_session_id(session_id))
    s, usage, events, context = d.record, d.usage, d.events, d.context
    if as_json:
        doc = d.document()
        print(json.dumps(doc, ensure_ascii=False))
        return
    console = Console()
    console.print(f"[bold]session[/] {s.id}  {_status_cell(d.row, time.time())}")
    runner = s.options.get("runner")
    ran_by = f" · runner {runner}" if isinstance(runner, str) else ""
    console.print(f"model {s.model} · mode {s.mode}{ran_by} · workdir {s.workdir}")
    if s.parent_id:
        console.print(f"parent {s.parent_id}")
    if d.worker is not None:
        alive = "alive" if d.worker.alive else "not running"
        console.print(f"worker {d.worker.executor_id} ({alive})")
    cost = f" · ${usage.cost_usd:.4f}" if usage.cost_usd is not None else ""
    console.print(f"turns {usage.turns} · {TokenFigures.of(usage).line()}{cost}")
    if context is not None:
        console.print(context_line(context))
    if d.row.question:
        console.print(f"[bold magenta]asks[/] {d.row.question}")
    if s.error:
        console.print(f"[red]error[/] {s.error}")
    console.print()
    printer = ProgressPrinter(console)
    for ev in events:
        printer(ev)
    if s.result is not None:
        console.print_json(json.dumps(s.result))


@sessions_app.command("tail")
def tail(
    session_id: SessionIdArg,
    follow: Annotated[
        bool, typer.Option("--follow/--no-follow", "-f", help="Keep following.")
    ] = True,
    timeout: Annotated[float, typer.Option(help="Stop following after this many seconds.")] = 0,
) -> None:
    """Print a session's transcript and follow it until the session ends."""
    from swarmdeck.views.follow import SessionFollower

    catalog = open_catalog()
    follower = SessionFollower(catalog, catalog.resolve_session_id(session_id))
    printer = ProgressPrinter()
    started = time.monotonic()
    while True:
        for ev in follower.poll():
            printer(ev)
        if not follow or follower.ended:
            break
        if timeout and time.monotonic() - started > timeout:
            break
        time.sleep(0.2)
    print(f"session {follower.session_id}: {follower.status}", file=sys.stderr)


@sessions_app.command("resume")
def resume(
    session_id: SessionIdArg,
) -> None:
    """Resume a session whose process died, that failed (on a provider error, say) or that
    was stopped (Ctrl-C): take over its work, or ask the model again, and run it to the end
    here."""
    from swarmdeck.cli.following import (
        EXIT_INTERRUPTED,
        exit_code_for,
        follow_or_stop,
        run_and_follow,
    )
    from swarmdeck.cli.hosting import session_host

    host = session_host(serve_queue=True)
    sid = host.catalog.resolve_session_id(session_id)
    failed = host.catalog.get_session(sid).status in ("failed", "cancelled")

    async def go() -> Followed:
        try:
            # DBOS's sync calls refuse to run on a running loop.
            await asyncio.to_thread(host.launch().recover_dead_workers)
            if failed:
                # A new generation: the turn that did not finish is asked again.
                await host.retry_session(sid)
            return await follow_or_stop(host, sid, run_and_follow(host, sid, start=not failed), 0)
        finally:
            await host.aclose()

    followed = asyncio.run(go())
    final = host.catalog.get_session(sid)
    print(final.final_text or "")
    if followed.stopped:
        print(f"session {sid}: interrupted by {followed.by}, stopped again", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED)
    print(f"session {sid}: {final.status}", file=sys.stderr)
    raise typer.Exit(exit_code_for((followed.outcome or {}).get("status", "failed")))


def require_text(text: str, what: str, usage: str) -> None:
    """Refuse an empty (or blank) message before anything is stored."""
    if not text.strip():
        raise UsageError(f"the {what} is empty; nothing was sent", f"give it some text: `{usage}`")


@sessions_app.command("send")
def send(
    session_id: SessionIdArg,
    text: Annotated[str, typer.Argument(help="The message.")],
    msg_id: Annotated[
        str | None,
        typer.Option("--id", help="Message id; a retry with the same id is delivered once."),
    ] = None,
    pin: Annotated[
        bool,
        typer.Option("--pin", help="Keep this message verbatim when older turns are compacted."),
    ] = False,
) -> None:
    """Deliver a message to a session; kept until a worker runs it if none does now."""
    from swarmdeck.runtime.host import Host

    require_text(text, "message", f'swarmdeck sessions send {session_id} "TEXT"')
    host = Host()
    sid = host.catalog.resolve_session_id(session_id)
    fresh = host.send(sid, text, msg_id, pinned=pin)
    print(json.dumps({"session_id": sid, "delivered": True, "duplicate": not fresh}))


@sessions_app.command("compact")
def compact(
    session_id: Annotated[str, typer.Argument(help="Session id (a unique prefix is enough).")],
    msg_id: Annotated[
        str | None,
        typer.Option("--id", help="Request id; a retry with the same id is delivered once."),
    ] = None,
) -> None:
    """Compact a session's context now: it summarizes its older turns at its next turn
    boundary (at once when it rests), even below its threshold."""
    from swarmdeck.runtime.host import Host

    host = Host()
    sid = host.catalog.resolve_session_id(session_id)
    fresh = host.compact(sid, msg_id)
    print(json.dumps({"session_id": sid, "requested": True, "duplicate": not fresh}))


@sessions_app.command("answer")
def answer(
    session_id: SessionIdArg,
    text: Annotated[str, typer.Argument(help="The answer to its question.")],
    msg_id: Annotated[str | None, typer.Option("--id", help="Answer id, for safe retries.")] = None,
) -> None:
    """Answer a session that asked the user a question (status input_required)."""
    from swarmdeck.runtime.host import Host

    require_text(text, "answer", f'swarmdeck sessions answer {session_id} "TEXT"')
    host = Host()
    sid = host.catalog.resolve_session_id(session_id)
    fresh = host.answer(sid, text, msg_id)
    print(json.dumps({"session_id": sid, "delivered": True, "duplicate": not fresh}))


@sessions_app.command("cancel")
def cancel(
    session_id: SessionIdArg,
) -> None:
    """Cancel a session and every sub-agent below it."""
    # No engine here: the catalog records the cancel and DBOS's client stops the
    # workflows wherever they run (a process start, not an engine's, ~6 s under load).
    _on_tree(session_id, "cancelled", lambda host, sid: host.cancel_offline(sid))


@sessions_app.command("rm")
def rm(
    session_id: SessionIdArg,
) -> None:
    """Remove a finished session with all its sub-agents and transcripts."""
    _on_tree(session_id, "removed", lambda host, sid: host.remove(sid))


def _on_tree(session_id: str, done: str, act: Callable[[Any, str], list[str]]) -> None:
    """Act on a session's tree; print the ids it touched as {done: [...]}."""
    from swarmdeck.runtime.host import Host

    host = Host()
    print(json.dumps({done: act(host, host.catalog.resolve_session_id(session_id))}))


@sessions_app.command("tree")
def tree_cmd(
    session_id: Annotated[
        str | None, typer.Argument(help="Any session of the tree; default: every live tree.")
    ] = None,
) -> None:
    """Show a session tree: parent, sub-agents and their statuses."""
    catalog = open_catalog()
    if session_id is not None:
        root = catalog.get_session(catalog.resolve_session_id(session_id)).root_id
        Console().print(render_tree(catalog, root))
        return
    roots = sorted({catalog.get_session(i).root_id for i in catalog.live_session_ids()})
    if not roots:
        Console(stderr=True).print("no live sessions")
    for root in roots:
        Console().print(render_tree(catalog, root))


def render_tree(catalog: Catalog, root_id: str) -> object:
    """A rich Tree of a session and its descendants."""
    from rich.tree import Tree

    rows = catalog.list_sessions(root_id=root_id, limit=10_000)
    by_parent: dict[str | None, list[SessionRecord]] = {}
    for s in sorted(rows, key=lambda s: s.created_at):
        by_parent.setdefault(s.parent_id, []).append(s)

    def label(s: SessionRecord) -> str:
        style = STATUS_STYLE.get(s.status, "")
        return f"{s.id}  [{style}]{s.status}[/]  {_title(s)}"

    root = catalog.get_session(root_id)
    tree = Tree(label(root))

    def grow(node: Tree, parent: str) -> None:
        for child in by_parent.get(parent, []):
            grow(node.add(label(child)), child.id)

    grow(tree, root_id)
    return tree


# `sessions pull` lives in a module of its own and registers itself on sessions_app.
import swarmdeck.cli.sessions_pull  # noqa: E402,F401
