"""The TUI's tests: a pinned clock and time zone, so screens are the same in every run."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

pytest.importorskip("textual", reason="the TUI's tests need textual (the tui extra)")

from tests.ui.pilot_support import Tui, piloted


@pytest.fixture
def tui() -> Tui:
    """Every TUI test's way to run the app under textual's pilot: `async with tui(app) as
    pilot:` (see pilot_support.piloted)."""
    return piloted


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times of day print in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
