"""`swarmdeck sessions`: list, show, follow and resume sessions from the catalog."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.catalog.records import STATUSES, TERMINAL_STATUSES, SessionRecord
from swarmdeck.catalog.views import (
    ORPHANED,
    context_summary,
    orphaned_ids,
    session_document,
    session_summary,
)
from swarmdeck.cli.app import app
from swarmdeck.config import load_settings
from swarmdeck.errors import UsageError
from swarmdeck.ui.progress import ProgressPrinter

if TYPE_CHECKING:
    from swarmdeck.catalog.catalog import Catalog

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
    "input_required": "magenta",
}


def open_catalog() -> Catalog:
    """The catalog alone, without launching the engine (fast, read-mostly commands)."""
    from swarmdeck.catalog.catalog import Catalog
    from swarmdeck.secrets.redact import load_redactor
    from swarmdeck.secrets.store import CredentialStore

    settings = load_settings()
    redactor = load_redactor(CredentialStore(settings.credentials_dir))
    return Catalog.open(settings.store_url, redactor.redact)


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _title(s: SessionRecord) -> str:
    text = s.title or s.task
    flat = " ".join(text.split())
    return flat[:60] + ("…" if len(flat) > 60 else "")


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
    """List sessions, newest first."""
    listable = (*STATUSES, ORPHANED)
    if status is not None and status not in listable:
        raise UsageError(f"unknown status {status!r}", f"use one of: {', '.join(listable)}")
    catalog = open_catalog()
    if status == ORPHANED:  # derived: the live sessions nobody runs
        rows = [s for s in catalog.list_sessions(limit=100_000) if not s.terminal]
        orphaned = _orphaned(catalog, rows)
        rows = [s for s in rows if s.id in orphaned][:limit]
    else:
        rows = catalog.list_sessions(status=status, limit=limit)
        orphaned = _orphaned(catalog, rows)
    if as_json:
        print(json.dumps([session_summary(s, s.id in orphaned) for s in rows]))
        return
    if not rows:
        empty = f"no {status} sessions" if status else "no sessions yet — try `swarmdeck demo`"
        Console(stderr=True).print(empty)
        return
    table = Table(box=None, header_style="bold")
    for col in ("id", "status", "mode", "model", "parent", "created", "task"):
        table.add_column(col)
    for s in rows:
        shown = ORPHANED if s.id in orphaned else s.status
        style = STATUS_STYLE.get(shown, "")
        table.add_row(
            s.id,
            f"[{style}]{shown}[/]" if style else shown,
            s.mode,
            s.model,
            s.parent_id or "",
            _when(s.created_at),
            _title(s),
        )
    Console().print(table)


def _orphaned(catalog: Catalog, rows: list[SessionRecord]) -> set[str]:
    """The sessions whose worker died and that no one has taken over yet."""
    settings = load_settings()
    return orphaned_ids(catalog, settings.hostname, settings.lease_seconds, rows)


@sessions_app.command("show")
def show(
    session_id: Annotated[str, typer.Argument(help="Session id (a unique prefix is enough).")],
    as_json: Annotated[
        bool, typer.Option("--json", help="The record and transcript as JSON.")
    ] = False,
) -> None:
    """Show a session's record and its transcript."""
    catalog = open_catalog()
    s = catalog.get_session(catalog.resolve_session_id(session_id))
    if as_json:
        print(json.dumps(session_document(catalog, s), ensure_ascii=False))
        return
    events = catalog.events(s.id)
    usage = catalog.usage_totals([s.id])
    context = context_summary(events)
    console = Console()
    console.print(f"[bold]session[/] {s.id}  [{STATUS_STYLE.get(s.status, '')}]{s.status}[/]")
    console.print(f"model {s.model} · mode {s.mode} · workdir {s.workdir}")
    if s.parent_id:
        console.print(f"parent {s.parent_id}")
    cost = f" · ${usage.cost_usd:.4f}" if usage.cost_usd is not None else ""
    tokens = f"tokens in {usage.input} out {usage.output}{usage.estimated_note}"
    share = f" · cached {usage.cache_share:.0%}" if usage.cache_share else ""
    console.print(f"turns {usage.turns} · {tokens}{share}{cost}")
    if context is not None:
        console.print(context_line(context))
    if s.error:
        console.print(f"[red]error[/] {s.error}")
    console.print()
    printer = ProgressPrinter(console)
    for ev in events:
        printer(ev)
    if s.result is not None:
        console.print_json(json.dumps(s.result))


def context_line(context: dict[str, object]) -> str:
    """The context summary as one line: prompt against window, the runtime's tokens."""
    runtime: Any = context["runtime"]
    own = runtime["system"] + runtime["tools"]
    compacted = f" · compacted {context['compactions']}x" if context["compactions"] else ""
    return (
        f"context: last prompt {context['prompt_tokens']} of {context['window']} tokens "
        f"({context['tokenizer']}){compacted} · runtime per turn {own}: system prompt "
        f"{runtime['system']} (skill index {runtime['skills']}), tool schemas {runtime['tools']}"
    )


@sessions_app.command("tail")
def tail(
    session_id: Annotated[str, typer.Argument(help="Session id (a unique prefix is enough).")],
    follow: Annotated[
        bool, typer.Option("--follow/--no-follow", "-f", help="Keep following.")
    ] = True,
    timeout: Annotated[float, typer.Option(help="Stop following after this many seconds.")] = 0,
) -> None:
    """Print a session's transcript and follow it until the session ends."""
    catalog = open_catalog()
    sid = catalog.resolve_session_id(session_id)
    printer = ProgressPrinter()
    cursor = 0
    started = time.monotonic()
    while True:
        for ev in catalog.events(sid, after_id=cursor):
            cursor = max(cursor, ev.id)
            printer(ev)
        status = catalog.get_session(sid).status
        if not follow or status in TERMINAL_STATUSES:
            break
        if timeout and time.monotonic() - started > timeout:
            break
        time.sleep(0.2)
    print(f"session {sid}: {catalog.get_session(sid).status}", file=sys.stderr)


@sessions_app.command("resume")
def resume(
    session_id: Annotated[str, typer.Argument(help="Session id (a unique prefix is enough).")],
) -> None:
    """Resume a session whose process died, or that failed (on a provider error, say):
    take over its work, or ask the model again, and run it to the end here."""
    from swarmdeck.cli.hosting import session_host
    from swarmdeck.cli.run import exit_code_for, run_and_follow

    host = session_host(serve_queue=True)
    sid = host.catalog.resolve_session_id(session_id)
    failed = host.catalog.get_session(sid).status == "failed"

    async def go() -> str:
        try:
            # DBOS's sync calls refuse to run on a running loop.
            await asyncio.to_thread(host.launch().recover_dead_workers)
            if failed:
                # A new generation: the turn that failed is asked again.
                await host.retry_session(sid)
            outcome = await run_and_follow(host, sid, start=not failed)
            return outcome.get("status", "failed")
        finally:
            await host.services.aclose()
            host.shutdown()

    status = asyncio.run(go())
    final = host.catalog.get_session(sid)
    print(final.final_text or "")
    print(f"session {sid}: {final.status}", file=sys.stderr)
    raise typer.Exit(exit_code_for(status))


def require_text(text: str, what: str, usage: str) -> None:
    """Refuse an empty (or blank) message before anything is stored."""
    if not text.strip():
        raise UsageError(f"the {what} is empty; nothing was sent", f"give it some text: `{usage}`")


@sessions_app.command("send")
def send(
    session_id: Annotated[str, typer.Argument(help="Session id (a unique prefix is enough).")],
    text: Annotated[str, typer.Argument(help="The message.")],
    msg_id: Annotated[
        str | None,
        typer.Option("--id", help="Message id; a retry with the same id is delivered once."),
    ] = None,
) -> None:
    """Deliver a message to a session; kept until a worker runs it if none does now."""
    from swarmdeck.runtime.host import Host

    require_text(text, "message", f'swarmdeck sessions send {session_id} "TEXT"')
    host = Host()
    sid = host.catalog.resolve_session_id(session_id)
    fresh = host.send(sid, text, msg_id)
    print(json.dumps({"session_id": sid, "delivered": True, "duplicate": not fresh}))


@sessions_app.command("answer")
def answer(
    session_id: Annotated[str, typer.Argument(help="Session id (a unique prefix is enough).")],
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
    session_id: Annotated[str, typer.Argument(help="Session id (a unique prefix is enough).")],
) -> None:
    """Cancel a session and every sub-agent below it."""
    from swarmdeck.runtime.host import Host

    host = Host()
    sid = host.catalog.resolve_session_id(session_id)

    async def go() -> list[str]:
        try:
            return await host.cancel(sid)
        finally:
            host.shutdown()

    cancelled = asyncio.run(go())
    print(json.dumps({"cancelled": cancelled}))


@sessions_app.command("rm")
def rm(
    session_id: Annotated[str, typer.Argument(help="Session id (a unique prefix is enough).")],
) -> None:
    """Remove a finished session with all its sub-agents and transcripts."""
    from swarmdeck.runtime.host import Host

    host = Host()
    removed = host.remove(host.catalog.resolve_session_id(session_id))
    print(json.dumps({"removed": removed}))


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
