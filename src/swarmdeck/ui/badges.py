"""Status badges: one look tells who runs, who waits on a timer, and who waits for you."""

from __future__ import annotations

from rich.text import Text

from swarmdeck.views.fleet import ORPHANED, SessionRow

BADGE_WIDTH = 16
BADGE_STYLE = {
    "pending": "dim",
    "running": "bold yellow",
    "waiting": "cyan",
    "idle": "blue",
    # Waits for a person: the one badge drawn as a block of colour.
    "input_required": "bold white on magenta",
    "completed": "green",
    "failed": "bold red",
    "cancelled": "dim",
    "budget_exceeded": "red",
    ORPHANED: "bold red",
}
BADGE_MARK = {
    "pending": "○",
    "running": "▶",
    "waiting": "◷",
    "idle": "◦",
    "input_required": "?",
    "completed": "✓",
    "failed": "✗",
    "cancelled": "x",
    "budget_exceeded": "$",
    ORPHANED: "!",
}


def badge(row: SessionRow, now: float) -> Text:
    """The row's status as a badge of fixed width (with the seconds a timer has left)."""
    left = row.seconds_left(now)
    # Waiting for you comes first, with or without a worker to run it now.
    shown = "input_required" if row.needs_me else row.status
    word = "needs you" if row.needs_me else row.status
    label = f"{BADGE_MARK.get(shown, ' ')} {word}"
    if left is not None:
        label += f" {left:.0f}s"
    return Text(label[:BADGE_WIDTH].ljust(BADGE_WIDTH), style=BADGE_STYLE.get(shown, ""))
