"""`swarmdeck usage`: tokens and cost from the usage ledger."""

from __future__ import annotations

import datetime as dt
import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.overview import Overview
from swarmdeck.catalog.records import UsageTotals, cache_share, estimated_note
from swarmdeck.catalog.usage import USAGE_GROUPS
from swarmdeck.cli.app import app
from swarmdeck.cli.sessions import open_catalog
from swarmdeck.errors import UsageError
from swarmdeck.runtime.budget import UNITS, WARN_SHARE, budget_of, spent_of
from swarmdeck.views.figures import TokenFigures
from swarmdeck.views.prefixes import shortest_prefixes


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


def _row(totals: UsageTotals) -> dict[str, Any]:
    """A group's totals as the ledger's row shape (what by_model holds per model)."""
    return {
        "turns": totals.turns,
        "input": totals.input,
        "output": totals.output,
        "cache_read": totals.cache_read,
        "cache_write": totals.cache_write,
        "cost_usd": totals.cost_usd,
        "estimated_turns": totals.estimated_turns,
    }


def _groups(
    catalog: Catalog, by: str, ids: list[str] | None, since: float | None, totals: UsageTotals
) -> dict[str, dict[str, Any]]:
    """The rows of the table, by group; a tree's carries its root's budgets, if any."""
    if by == "model":
        return dict(totals.by_model)
    groups = {k: _row(v) for k, v in catalog.usage_by(by, ids, since=since).items()}
    for root_id, row in groups.items() if by == "tree" else ():
        row["budget"] = tree_budget(catalog, root_id)
    return groups


def tree_budget(catalog: Catalog, root_id: str) -> dict[str, dict[str, float]]:
    """What a tree spent of each budget set on its root (over its whole life)."""
    record = catalog.find_session(root_id)
    if record is None:
        return {}  # removed: its usage stays in the ledger
    budget = budget_of(record)
    if not budget:
        return {}
    spent = spent_of(catalog.usage_totals([root_id, *catalog.descendant_ids(root_id)]))
    return {k: {"limit": v, "spent": spent[k], "share": spent[k] / v} for k, v in budget.items()}


def budget_cell(budget: dict[str, dict[str, float]]) -> str:
    """The most spent of a tree's budgets, short: `⚠ 82% of 10k tok`, `104% of $1` (80 columns hold a tree's id beside it)."""
    if not budget:
        return ""
    key, b = max(budget.items(), key=lambda kv: kv[1]["share"])
    unit = "tok" if key == "max_tokens" else UNITS[key]
    limit = f"${b['limit']:,.4g}" if key == "max_cost" else f"{_short(b['limit'])} {unit}"
    mark = "⚠ " if WARN_SHARE <= b["share"] < 1 else ""
    return f"{mark}{b['share']:.0%} of {limit}"


def _short(n: float) -> str:
    """10000 as `10k`, 2500000 as `2.5M`."""
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.3g}{suffix}"
    return f"{n:g}"


def _labels(catalog: Catalog, by: str, keys: list[str]) -> dict[str, str]:
    """Each group's name in the table: a tree by its root's shortest unique id prefix."""
    if by != "tree":
        return {k: k for k in keys}
    prefixes = shortest_prefixes(Overview(catalog).all_ids())
    return {k: prefixes.get(k, k) for k in keys}


@app.command()
def usage(
    session: Annotated[
        str | None, typer.Option("--session", help="One session and its sub-agents.")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Only turns since this date (YYYY-MM-DD).")
    ] = None,
    by: Annotated[
        str,
        typer.Option(
            "--by",
            help="Group by session tree (with its budget), named agent, model, or day.",
        ),
    ] = "model",
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Tokens and cost, summed over sessions per model (or tree, agent, day). `input`
    counts all input tokens; `cached` those a prompt cache served, and their share of all
    input; cost prices cached reads and cache writes as the vendor does (genai-prices).
    By tree (its root's id), `budget` is what the tree spent of its tightest budget."""
    if by not in USAGE_GROUPS:
        raise UsageError(f"unknown grouping {by!r}", f"use --by {', '.join(USAGE_GROUPS)}")
    catalog = open_catalog()
    ids = None
    if session:
        sid = catalog.resolve_session_id(session)
        ids = [sid, *catalog.descendant_ids(sid)]
    start = _since(since)
    totals = catalog.usage_totals(ids, since=start)
    groups = _groups(catalog, by, ids, start, totals)
    if as_json:
        doc = {
            "turns": totals.turns,
            "tokens": totals.tokens(),
            "estimated_turns": totals.estimated_turns,
            "cost_usd": totals.cost_usd,
            "cache_share": totals.cache_share,
            "by_model": {
                m: {**r, "cache_share": _row_share(r)} for m, r in totals.by_model.items()
            },
            "by": by,
            "groups": {k: {**r, "cache_share": _row_share(r)} for k, r in groups.items()},
        }
        print(json.dumps(doc))
        return
    _print_table(catalog, by, groups, totals)


def _print_table(
    catalog: Catalog, by: str, groups: dict[str, dict[str, Any]], totals: UsageTotals
) -> None:
    """The groups and their total, as a table; the note on estimated counts on stderr."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = [by, "turns", "input", "cached", "output", "cost"]
    columns += ["budget"] if by == "tree" else []
    for col in columns:
        table.add_column(col, justify="left" if col in (by, "budget") else "right", no_wrap=True)
    labels = _labels(catalog, by, list(groups))
    for key, row in sorted(groups.items()):
        note = estimated_note(row["estimated_turns"], row["turns"])
        figures = TokenFigures.of(row, note)
        cells = _figure_cells(labels[key], row["turns"], figures, row["cost_usd"])
        table.add_row(*cells, *([budget_cell(row["budget"])] if by == "tree" else []))
    figures = TokenFigures.of(totals)
    total = _figure_cells("[bold]total[/]", totals.turns, figures, totals.cost_usd)
    table.add_row(*total, *([""] if by == "tree" else []))
    Console().print(table)
    if totals.estimated_note:
        Console(stderr=True).print(
            "(estimated): the provider reported no token counts for those turns; "
            "they were estimated at a token per 4 characters"
        )
