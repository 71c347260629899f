"""The TUI's tests: a pinned clock and time zone, so screens are the same in every run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

pytest.importorskip("textual", reason="the TUI's tests need textual (the tui extra)")


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times of day print in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
