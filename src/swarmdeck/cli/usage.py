"""`swarmdeck usage`: tokens and cost from the usage ledger."""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.catalog.records import cache_share, estimated_note
from swarmdeck.cli.app import app
from swarmdeck.cli.sessions import open_catalog
from swarmdeck.errors import UsageError


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError as exc:
        raise UsageError(f"bad date {text!r}", "use YYYY-MM-DD or an ISO time") from exc


def _row_share(row: dict[str, Any]) -> float | None:
    return cache_share(row["input"], row["cache_read"], row["cache_write"])


def _cached(read: int, share: float | None) -> str:
    """Cached input tokens and their share of all input (the prompt cache's hit share)."""
    return f"{read} ({share:.0%})" if share is not None else str(read)


@app.command()
def usage(
    session: Annotated[
        str | None, typer.Option("--session", help="One session and its sub-agents.")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only turns since this date (YYYY-MM-DD).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Tokens and cost per model, summed over sessions. `input` counts the input tokens no
    prompt cache served; `cached` those it did, and their share of all input."""
    catalog = open_catalog()
    ids = None
    if session:
        sid = catalog.resolve_session_id(session)
        ids = [sid, *catalog.descendant_ids(sid)]
    totals = catalog.usage_totals(ids, since=_since(since))
    if as_json:
        print(
            json.dumps(
                {
                    "turns": totals.turns,
                    "tokens": totals.tokens(),
                    "estimated_turns": totals.estimated_turns,
                    "cost_usd": totals.cost_usd,
                    "cache_share": totals.cache_share,
                    "by_model": {
                        model: {**row, "cache_share": _row_share(row)}
                        for model, row in totals.by_model.items()
                    },
                }
            )
        )
        return
    table = Table(box=None, header_style="bold")
    for col in ("model", "turns", "input", "cached", "output", "cost"):
        table.add_column(col, justify="right" if col != "model" else "left")
    for model, row in sorted(totals.by_model.items()):
        cost = f"${row['cost_usd']:.4f}" if row["cost_usd"] is not None else "unknown"
        note = estimated_note(row["estimated_turns"], row["turns"])
        table.add_row(
            model,
            str(row["turns"]),
            f"{row['input']}{note}",
            _cached(row["cache_read"], _row_share(row)),
            f"{row['output']}{note}",
            cost,
        )
    total_cost = f"${totals.cost_usd:.4f}" if totals.cost_usd is not None else "unknown"
    note = totals.estimated_note
    table.add_row(
        "[bold]total[/]",
        str(totals.turns),
        f"{totals.input}{note}",
        _cached(totals.cache_read, totals.cache_share),
        f"{totals.output}{note}",
        total_cost,
    )
    Console().print(table)
    if note:
        Console(stderr=True).print(
            "(estimated): the provider reported no token counts for those turns; "
            "they were estimated at a token per 4 characters"
        )
