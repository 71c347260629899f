"""The members' live table and the progress lines of a swarm."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from swarmdeck.ui.swarm_table import changes, members_table, summary_line

TOKENS = {"input": 1500, "output": 300, "reasoning": 0, "cache_read": 0, "cache_write": 0}


def member(role: str, status: str, attempts: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "role": role,
        "mode": "review",
        "model": "fake:m",
        "status": status,
        "attempts": attempts,
        "turns": 3,
        "tokens": TOKENS,
        "cost_usd": 0.0123,
        "verdict": "completed" if status == "completed" else None,
        **extra,
    }


def report(*members: dict[str, Any], verdict: str | None = None) -> dict[str, Any]:
    return {
        "session_id": "S1",
        "verdict": verdict,
        "status": "running",
        "members": list(members),
        "tokens": TOKENS,
        "cost_usd": 0.05,
        "duration_s": 2.73,
    }


def test_the_table_shows_every_member() -> None:
    console = Console(record=True, width=120)
    console.print(
        members_table(
            report(
                member("security", "running"),
                member("tests", "completed", 2, assigned_role="backup"),
            )
        )
    )
    text = console.export_text()
    assert "swarm S1 · running" in text
    rows = [line.split() for line in text.splitlines()]
    assert ["security", "review", "fake:m", "running", "1", "3", "1.8k", "$0.0123"] in rows
    assert "tests → backup" in text and "$0.0123" in text and "1.8k" in text
    empty = Console(record=True, width=120)
    empty.print(members_table(report()))
    assert "(planning)" in empty.export_text()


def test_changes_and_the_summary() -> None:
    before = report()
    after = report(member("a", "running"), member("b", "pending"))
    assert changes(before, after) == [
        "planned 2 member(s)",
        "a [review, fake:m] try 1: running",
        "b [review, fake:m] try 1: pending",
    ]
    later = report(member("a", "completed"), member("b", "error", 2, reason="it failed"))
    assert changes(after, later) == [
        "a [review, fake:m] try 1: completed",
        "b [review, fake:m] try 2: error (it failed)",
    ]
    assert changes(later, later) == []
    done = report(member("a", "completed"), member("b", "error"), verdict="partial")
    assert summary_line(done) == (
        "swarm S1: partial · 1/2 members completed · 1800 tokens · cost $0.0500 · 2.7s"
    )
