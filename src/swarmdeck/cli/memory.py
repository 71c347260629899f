"""`swarmdeck memory ls|get|history`: read the blackboards swarms and sessions share."""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.cli.app import app
from swarmdeck.cli.dispatch import HumanCommand
from swarmdeck.errors import NotFoundError, UsageError

if TYPE_CHECKING:
    from swarmdeck.memory.blackboard import Blackboard, Scope

memory_app = typer.Typer(
    help="Read the blackboard of a swarm, a session tree or the store.", no_args_is_help=True
)
app.add_typer(memory_app, name="memory")

SessionOpt = Annotated[
    str | None,
    typer.Option(
        "--session", "-s", help="A session of the swarm or tree (a unique id prefix is enough)."
    ),
]
ScopeOpt = Annotated[
    str | None,
    typer.Option(
        "--scope", help="swarm (default for a swarm's session), tree (default otherwise) or store."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
VALUE_CHARS = 60


def _open(session: str | None, scope: str | None) -> tuple[Blackboard, Scope | None]:
    """The blackboard, and the scope the options name (None: no scope named)."""
    from swarmdeck.cli.sessions import open_catalog
    from swarmdeck.memory.blackboard import Blackboard, Scope
    from swarmdeck.memory.scopes import SCOPES, STORE_SCOPE_ID, scope_for

    catalog = open_catalog()
    board = Blackboard(catalog.engine, catalog.redact)
    if scope is not None and scope not in SCOPES:
        raise UsageError(f"unknown scope {scope!r}", f"use one of: {', '.join(SCOPES)}")
    if scope == "store":
        return board, Scope("store", STORE_SCOPE_ID)
    if session is None:
        if scope is not None:
            raise UsageError(f"--scope {scope} needs --session ID", "name a session of it")
        return board, None
    record = catalog.get_session(catalog.resolve_session_id(session))
    return board, scope_for(record, scope)


def _open_named(session: str | None, scope: str | None) -> tuple[Blackboard, Scope]:
    """The blackboard and the scope the options must name."""
    board, chosen = _open(session, scope)
    if chosen is None:
        raise UsageError(
            "which blackboard? pass --session ID (or --scope store)",
            "`swarmdeck memory ls` lists the blackboards that hold keys",
        )
    return board, chosen


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


@memory_app.command("ls", cls=HumanCommand)
def ls(
    session: SessionOpt = None,
    scope: ScopeOpt = None,
    prefix: Annotated[str, typer.Option("--prefix", help="Only keys starting with this.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """List the keys of a blackboard; without --session, the blackboards that hold keys."""
    board, chosen = _open(session, scope)
    if chosen is None:
        scopes = board.scopes()
        if as_json:
            print(json.dumps([{"scope": s.kind, "id": s.id, "keys": n} for s, n in scopes]))
            return
        if not scopes:
            Console(stderr=True).print("no blackboard holds keys yet")
            return
        table = Table(box=None, header_style="bold")
        for col in ("scope", "id", "keys"):
            table.add_column(col)
        for s, n in scopes:
            table.add_row(s.kind, s.id, str(n))
        Console().print(table)
        return
    entries = board.list(chosen, prefix)
    if as_json:
        print(json.dumps([e.as_dict() for e in entries], ensure_ascii=False))
        return
    if not entries:
        Console(stderr=True).print(f"no keys in the {chosen} blackboard")
        return
    table = Table(box=None, header_style="bold", title=f"blackboard of {chosen}")
    for col in ("key", "version", "value", "writer", "updated"):
        table.add_column(col)
    for e in entries:
        table.add_row(e.key, str(e.version), _short(e.value), e.writer, _when(e.ts))
    Console().print(table)


@memory_app.command("get", cls=HumanCommand)
def get(
    key: Annotated[str, typer.Argument(help="The key.")],
    session: SessionOpt = None,
    scope: ScopeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a key's value (stdout: the value as JSON) and its version (stderr)."""
    board, where = _open_named(session, scope)
    entry = board.get(where, key)
    if entry is None or entry.deleted:
        gone = f" (deleted at version {entry.version})" if entry else ""
        raise NotFoundError(
            f"no key {key!r} in the {where} blackboard{gone}",
            "`swarmdeck memory ls` lists its keys",
        )
    if as_json:
        print(json.dumps(entry.as_dict(), ensure_ascii=False))
        return
    print(json.dumps(entry.value, ensure_ascii=False, indent=2))
    Console(stderr=True).print(f"version {entry.version} · by {entry.writer} · {_when(entry.ts)}")


# Same options as `get` on purpose: typer reads each command's own signature.
@memory_app.command("history", cls=HumanCommand)
def history(
    key: Annotated[str, typer.Argument(help="The key.")],
    session: SessionOpt = None,
    scope: ScopeOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Every version a key had: who wrote what, when (a delete is a version too)."""
    board, where = _open_named(session, scope)
    entries = board.history(where, key)
    if as_json:
        print(json.dumps([{**e.as_dict(), "op": e.op} for e in entries], ensure_ascii=False))
        return
    if not entries:
        raise NotFoundError(f"no key {key!r} in the {where} blackboard", "check the key")
    table = Table(box=None, header_style="bold", title=f"{key} in the {where} blackboard")
    for col in ("version", "op", "value", "writer", "when"):
        table.add_column(col)
    for e in entries:
        shown = "" if e.op == "delete" else _short(e.value)
        table.add_row(str(e.version), e.op, shown, e.writer, _when(e.ts))
    Console().print(table)
