"""Human-readable progress lines for transcript events, on stderr and in run.log: shared by
the CLI and dispatch's run log, so it sits in views, below both (dispatch never imports ui)."""

from __future__ import annotations

import datetime as dt
import json
import time

from rich.console import Console
from rich.markup import escape

from swarmdeck.catalog.records import (
    BUDGET_WARNING_KIND,
    COMPACT_REQUEST_KIND,
    CONTEXT_NOTE_KIND,
    RESUMED_KIND,
    EventRecord,
)
from swarmdeck.views.transcript import compaction_line, resumed_line

MAX_PREVIEW = 160


def clock(ts: float | None = None) -> str:
    """A time of day as progress lines carry it (HH:MM:SS, local time)."""
    return dt.datetime.fromtimestamp(time.time() if ts is None else ts).strftime("%H:%M:%S")


def _preview(text: str, limit: int = MAX_PREVIEW) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _call_preview(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments or "{}")
        shown = ", ".join(f"{k}={json.dumps(v)[:60]}" for k, v in args.items())
    except (json.JSONDecodeError, AttributeError):
        shown = arguments[:60]
    return f"{name}({shown})"


class ProgressPrinter:
    """Prints one line per transcript event, each with the time it happened."""

    def __init__(self, console: Console | None = None) -> None:
        # Soft wrap: a line stays one line (grep-able); the terminal wraps it for the eye.
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)

    def __call__(self, ev: EventRecord) -> None:
        line = self.render(ev)
        if line:
            self.console.print(line)

    def note(self, text: str) -> None:
        """A line of the caller's own (not an event), timed like the rest."""
        self.console.print(f"[dim]{clock()}[/] {escape(text)}")

    def render(self, ev: EventRecord) -> str | None:
        """The markup lines for one event, each after its time; None for events a human
        need not see."""
        body = self.render_body(ev)
        if body is None:
            return None
        stamp = f"[dim]{clock(ev.ts)}[/] "
        return "\n".join(stamp + line for line in body.split("\n"))

    def render_body(self, ev: EventRecord) -> str | None:
        """The markup line(s) for one event, untimed."""
        p = ev.payload
        if ev.kind == "task":
            return f"[bold]task[/]  {escape(_preview(p['text']))}"
        if ev.kind in ("user", "child_update", "timer"):
            return f"[cyan]{ev.kind}[/]  {escape(_preview(p['text']))}"
        if ev.kind == "assistant":
            parts = []
            if p["text"]:
                parts.append(f"[green]model[/] {escape(_preview(p['text']))}")
            parts.extend(
                f"[yellow]  → {escape(_call_preview(c['name'], c['arguments']))}[/]"
                for c in p["tool_calls"]
            )
            return "\n".join(parts) or "[green]model[/] (empty turn)"
        if ev.kind == "tool_result":
            style = "red" if p.get("is_error") else "dim"
            return f"[{style}]  ← {escape(_preview(p['content'], 120))}[/]"
        if ev.kind == "audit":
            what = {k: v for k, v in p.items() if k in ("session", "runs", "files", "bytes")}
            shown = ", ".join(f"{k}={v}" for k, v in what.items())
            return f"[magenta]audit[/] {escape(p['action'])} {escape(shown)}: {escape(p['why'])}"
        if ev.kind == "swarm":
            return _swarm_line(p)
        if ev.kind == "error":
            return f"[red]error[/] {escape(p['message'])}"
        if ev.kind == "compaction":
            return f"[blue]context[/] {escape(compaction_line(p))}"
        if ev.kind in (COMPACT_REQUEST_KIND, CONTEXT_NOTE_KIND):
            return f"[blue]context[/] {escape(str(p.get('text', '')))}"
        if ev.kind == BUDGET_WARNING_KIND:
            return f"[bold yellow]budget[/] {escape(str(p.get('text', '')))}"
        if ev.kind == RESUMED_KIND:
            return f"[bold yellow]resumed[/] {escape(resumed_line(p))}"
        if ev.kind == "notice":
            return f"[yellow]wait[/]  {escape(_preview(p.get('text') or p.get('reason', ''), 300))}"
        if ev.kind == "status":
            return f"[bold]{escape(p['status'])}[/]" + (
                f" [red]{escape(p['error'])}[/]" if p.get("error") else ""
            )
        return None


def _swarm_line(p: dict) -> str | None:
    """A swarm coordinator's journal entry (plan, spawn, end, result) as one line."""
    phase = p.get("phase")
    if phase == "plan":
        roles = ", ".join(f"{m['role']} ({m['mode']}, {m['model']})" for m in p["members"])
        dropped = f"; dropped {', '.join(d['role'] for d in p['dropped'])}" if p["dropped"] else ""
        return f"[magenta]swarm[/] plan: {escape(roles)}{escape(dropped)}"
    if phase == "spawn":
        return (
            f"[magenta]swarm[/] started {escape(p['role'])} try {p['attempt'] + 1}: "
            f"{escape(p['session_id'])}"
        )
    if phase == "end":
        why = f" ({_preview(p['reason'], 120)})" if p.get("reason") else ""
        return f"[magenta]swarm[/] {escape(p['role'])}: {escape(p['verdict'])}{escape(why)}"
    if phase == "result":
        return f"[magenta]swarm[/] {escape(p['verdict'])}, {escape(_merged(p))}"
    return None


# How a swarm's result was put together (its `merged_by`), in words.
MERGED_BY = {
    "model": "merged by the coordinator's model",
    "merge": "merged without the coordinator's model",
}


def _merged(p: dict) -> str:
    """How the result was merged; `none`: no member ran (no plan), so nothing was."""
    how = MERGED_BY.get(p["merged_by"])
    if how is not None:
        return how
    return "nothing merged" + (f": {_preview(p['error'], 200)}" if p.get("error") else "")
