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
from swarmdeck.views.figures import TokenFigures


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError as exc:
        raise UsageError(f"bad date {text!r}", "use YYYY-MM-DD or an ISO time") from exc


def _row_share(row: dict[str, Any]) -> float | None:
    return cache_share(row["input"], row["cache_read"], row["cache_write"])


def _figure_cells(model: str, turns: int, figures: TokenFigures, cost: float | None) -> list[str]:
    """One row of the table: the figures as every surface defines them (views/figures.py)."""
    note = figures.note
    shown_cost = f"${cost:.4f}" if cost is not None else "unknown"
    cells = [f"{figures.input:,}{note}", figures.cached_cell(), f"{figures.output:,}{note}"]
    return [model, str(turns), *cells, shown_cost]


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
    """Tokens and cost per model, summed over sessions. `input` counts all input tokens;
    `cached` those a prompt cache served, and their share of all input."""
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
        note = estimated_note(row["estimated_turns"], row["turns"])
        figures = TokenFigures.of(row, note)
        table.add_row(*_figure_cells(model, row["turns"], figures, row["cost_usd"]))
    figures = TokenFigures.of(totals)
    table.add_row(*_figure_cells("[bold]total[/]", totals.turns, figures, totals.cost_usd))
    note = totals.estimated_note
    Console().print(table)
    if note:
        Console(stderr=True).print(
            "(estimated): the provider reported no token counts for those turns; "
            "they were estimated at a token per 4 characters"
        )
