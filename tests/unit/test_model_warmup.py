"""A worker imports the model SDKs only once what it took over at start began again
(tests/unit/test_heap.py: what start-up made is then frozen)."""

from __future__ import annotations

import math
import threading
import time
from typing import Any, cast

from swarmdeck.cli.worker import ModelWarmup
from swarmdeck.runtime.duties import Duty


class TakingOver:
    """The one question the warm-up asks the engine, answered as the test sets it."""

    def __init__(self) -> None:
        self.waiting = True

    def resuming(self) -> bool:
        return self.waiting


def _warmup(engine: TakingOver) -> tuple[ModelWarmup, list[str], threading.Event]:
    imported: list[str] = []
    done = threading.Event()

    def preload() -> None:
        imported.append(threading.current_thread().name)
        done.set()

    warmup = ModelWarmup(cast(Any, engine), preload)
    warmup.duty = Duty("warm", 0.05, warmup.poll)
    return warmup, imported, done


async def test_the_import_waits_for_the_sessions_taken_over_then_runs_once() -> None:
    engine = TakingOver()
    warmup, imported, done = _warmup(engine)
    await warmup.poll()
    assert not done.wait(0.2) and imported == []
    engine.waiting = False
    await warmup.poll()
    await warmup.poll()
    assert done.wait(5)
    time.sleep(0.1)
    assert imported == ["sd-warmup"]  # in a thread of its own, once
    assert warmup.duty is not None and warmup.duty.every_s == math.inf


async def test_the_import_runs_at_the_latest_even_if_a_session_never_begins() -> None:
    warmup, imported, done = _warmup(TakingOver())
    warmup.latest = time.monotonic() - 1
    await warmup.poll()
    assert done.wait(5) and imported == ["sd-warmup"]
