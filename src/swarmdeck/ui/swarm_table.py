"""A swarm's members as a table (role, model, status, turns, tokens, cost), and the lines
printed when no terminal shows a live one."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from swarmdeck.views.figures import TokenFigures

STATUS_STYLE = {
    "completed": "green",
    "running": "yellow",
    "pending": "yellow",
    "waiting": "dim",
    "skipped": "dim",
    "error": "red",
    "failed": "red",
    "cancelled": "red",
}


def _cost(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _tokens(tokens: dict[str, int]) -> str:
    total = TokenFigures.of(tokens).total
    return f"{total / 1000:.1f}k" if total >= 1000 else str(total)


def members_table(report: dict[str, Any]) -> Table:
    """The live table of a swarm (a report built with `live`)."""
    status = report.get("status") or ""
    title = f"swarm {report['session_id']} · {report['verdict'] or status}"
    table = Table(title=title, box=None, header_style="bold", title_justify="left")
    for col in ("role", "mode", "model", "status", "try", "turns", "tokens", "cost"):
        table.add_column(
            col, justify="right" if col in ("try", "turns", "tokens", "cost") else "left"
        )
    if not report["members"]:
        table.add_row("(planning)", "", "", status, "", "", "", "")
    for m in report["members"]:
        style = STATUS_STYLE.get(m["status"], "")
        role = m["role"] + (f" → {m['assigned_role']}" if m.get("assigned_role") else "")
        table.add_row(
            role,
            m["mode"],
            m["model"],
            f"[{style}]{m['status']}[/]" if style else m["status"],
            str(m["attempts"]),
            str(m["turns"]),
            _tokens(m["tokens"]),
            _cost(m["cost_usd"]),
        )
    return table


def changes(before: dict[str, Any] | None, after: dict[str, Any]) -> list[str]:
    """One line per member whose status or attempt changed (for a log, not a terminal)."""
    old = {m["role"]: m for m in (before or {}).get("members", [])}
    lines = []
    if before is not None and not before["members"] and after["members"]:
        lines.append(f"planned {len(after['members'])} member(s)")
    for m in after["members"]:
        prev = old.get(m["role"])
        if prev is None or (prev["status"], prev["attempts"]) != (m["status"], m["attempts"]):
            extra = f" ({m['reason']})" if m.get("reason") and m["status"] != "completed" else ""
            role = m["role"] + (f" → {m['assigned_role']}" if m.get("assigned_role") else "")
            lines.append(
                f"{role} [{m['mode']}, {m['model']}] try {m['attempts']}: {m['status']}{extra}"
            )
    return lines


def summary_line(report: dict[str, Any]) -> str:
    """The last line of the progress: verdict, members, tokens, cost, time."""
    done = sum(1 for m in report["members"] if m["verdict"] == "completed")
    tokens = TokenFigures.of(report["tokens"]).total
    return (
        f"swarm {report['session_id']}: {report['verdict']} · {done}/{len(report['members'])} "
        f"members completed · {tokens} tokens · cost {_cost(report['cost_usd'])} · "
        f"{report['duration_s']:.1f}s"
    )
