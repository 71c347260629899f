"""What the selected session is: its ids, worker, usage against its budget, context, the
question it asks you, its result, its artifacts with a preview, and its workdir."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from swarmdeck.ui.badges import badge
from swarmdeck.views.detail import SessionDetail, context_line
from swarmdeck.views.figures import TokenFigures
from swarmdeck.views.text import age

PREVIEW_LINES = 8
RESULT_CHARS = 1200


def inspector_body(d: SessionDetail, now: float) -> RenderableType:
    """The inspector's content for one session."""
    row, rec, usage = d.row, d.record, d.usage
    facts = Table.grid(padding=(0, 1))
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column(overflow="fold")
    facts.add_row("id", rec.id)
    facts.add_row("status", badge(row, now))
    facts.add_row("title", row.title)
    facts.add_row(
        "model", f"{rec.model} · mode {rec.mode}" + (f" · agent {rec.agent}" if rec.agent else "")
    )
    if rec.parent_id:
        facts.add_row("parent", rec.parent_id)
    if d.descendants:
        facts.add_row("below", f"{len(d.descendants)} sub-agent(s)")
    if d.worker is not None:
        w = d.worker
        where = f"{w.hostname} pid {w.pid}" if w.hostname else "not registered"
        beat = f", beat {w.heartbeat_age_s:.0f}s ago" if w.heartbeat_age_s is not None else ""
        state = "alive" if w.alive else "not running"
        facts.add_row("worker", f"{w.executor_id} ({where}, {state}{beat})")
    cost = f" · ${usage.cost_usd:.4f}" if usage.cost_usd is not None else ""
    facts.add_row("usage", f"{usage.turns} turns · {TokenFigures.of(usage).line()}{cost}")
    if d.budget:
        facts.add_row("budget", ", ".join(f"{k} {v}" for k, v in d.budget.items()))
    if d.context is not None:
        facts.add_row("context", context_line(d.context).removeprefix("context: "))
    workdir = rec.workdir + (" (git worktree)" if Path(rec.workdir, ".git").is_file() else "")
    facts.add_row("workdir", workdir)
    facts.add_row("age", f"{age(now - rec.created_at)} · updated {age(now - rec.updated_at)} ago")
    parts: list[RenderableType] = [facts]
    if row.question is not None:
        ask = Text("asks you: ", style="bold white on magenta")
        ask.append(row.question, style="bold")
        hint = "press a to answer"
        if row.unheld:
            hint += (
                " · no worker runs it now: it reads the answer when one does (`swarmdeck worker`)"
            )
        parts += [Text(), ask, Text(hint, style="magenta")]
    if rec.error:
        parts += [Text(), Text(f"error: {rec.error}", style="bold red")]
    if rec.result is not None:
        shown = json.dumps(rec.result, indent=2, ensure_ascii=False)
        if len(shown) > RESULT_CHARS:
            shown = shown[:RESULT_CHARS] + "\n…"
        parts += [Text(), Text("result", style="bold"), Text(shown)]
    elif rec.final_text:
        parts += [Text(), Text("final text", style="bold"), Text(rec.final_text[:RESULT_CHARS])]
    for art in d.artifacts:
        head = Text(f"artifact {art.name}", style="bold")
        head.append(f"  {art.size:,} bytes · o opens it", style="dim")
        preview = art.read().splitlines()[:PREVIEW_LINES]
        parts += [Text(), head, Text("\n".join(preview), style="italic")]
    return Group(*parts)


class Inspector(Static):
    """The selected session in detail."""

    DEFAULT_CSS = "Inspector { height: auto; padding: 0 1; }"
