"""A streaming turn touches its session at most once a second, and a busy or failing
store is not asked again at every chunk."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from swarmdeck.catalog.catalog import WriteWouldWait
from swarmdeck.runtime import turn_watch
from swarmdeck.runtime.services import set_services
from swarmdeck.runtime.turn_watch import RETRY_BUSY_S, TOUCH_EVERY_S, TurnWatch
from tests.manual_clock import ManualClock, install


class Catalog:
    """Counts touches; fails them the way it is told to."""

    is_sqlite = True

    def __init__(self, failure: Exception | None) -> None:
        self.failure = failure
        self.tries = 0

    def touch_active(self, session_id: str, *, wait: bool = True) -> None:
        assert session_id == "s1" and wait is False
        self.tries += 1
        if self.failure is not None:
            raise self.failure


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    return install(monkeypatch, turn_watch)


def stream(watch: TurnWatch, clock: ManualClock, seconds: float, every: float = 0.01) -> None:
    """Chunks arriving every `every` seconds for `seconds`."""

    async def chunks() -> None:
        for _ in range(round(seconds / every)):
            clock.now += every
            await watch.chunk()

    asyncio.run(chunks())


@pytest.mark.parametrize(
    ("failure", "most_tries"),
    [
        # One try at 1 s, then one every RETRY_BUSY_S: not one per chunk (300 chunks).
        (WriteWouldWait("locked"), 1 + round((3 - TOUCH_EVERY_S) / RETRY_BUSY_S)),
        # An unexpected failure is logged once a second, like a touch that landed.
        (RuntimeError("disk I/O error"), 3),
        (None, 3),
    ],
)
def test_touches_are_spaced_whatever_the_store_answers(
    clock: ManualClock, failure: Exception | None, most_tries: int
) -> None:
    catalog = Catalog(failure)
    set_services(SimpleNamespace(catalog=catalog))  # type: ignore[arg-type]
    try:
        watch = TurnWatch("s1", turn=0, generation=1)
        stream(watch, clock, 0.9)
        assert catalog.tries == 0, "a turn shorter than a second writes nothing"
        stream(watch, clock, 2.1)
        assert 2 <= catalog.tries <= most_tries
    finally:
        set_services(None)


def test_a_busy_store_is_tried_again_soon(clock: ManualClock) -> None:
    catalog = Catalog(WriteWouldWait("locked"))
    set_services(SimpleNamespace(catalog=catalog))  # type: ignore[arg-type]
    try:
        watch = TurnWatch("s1", turn=0, generation=1)
        stream(watch, clock, TOUCH_EVERY_S + 0.02)
        assert catalog.tries == 1
        catalog.failure = None
        stream(watch, clock, RETRY_BUSY_S + 0.02)
        assert catalog.tries == 2, "the skipped touch lands a moment later, not a second"
    finally:
        set_services(None)
