"""A monotonic clock the test moves, put in place of a module's `time`."""

from __future__ import annotations

from types import ModuleType

import pytest


class ManualClock:
    """time.monotonic, moved by the test (`clock.now += seconds`)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now


def install(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> ManualClock:
    """A ManualClock as `module.time`: for code that reads only time.monotonic."""
    clock = ManualClock()
    monkeypatch.setattr(module, "time", clock)
    return clock
