"""Ctrl-C and SIGTERM while a run is followed: the first asks the run to stop (the session
is stopped where it is, resumable, and the run says so), a second one leaves at once."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """The signals a followed run received: `stop` is set by the first one."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.signal: int | None = None

    def received(self, sig: int) -> None:
        """The loop's handler for SIGINT and SIGTERM."""
        if self.stop.is_set():
            raise KeyboardInterrupt  # a second signal: the user means it
        self.signal = sig
        self.stop.set()

    @property
    def name(self) -> str:
        """How the run was stopped, for a person: "Ctrl-C" or the signal's name."""
        if self.signal == signal.SIGINT:
            return "Ctrl-C"
        return signal.Signals(self.signal).name if self.signal else "a signal"


@contextmanager
def watched_signals() -> Iterator[Interrupts]:
    """Route SIGINT and SIGTERM to an Interrupts on the running loop while the block runs:
    left to asyncio, a Ctrl-C cancelled the following task and left the session running."""
    loop = asyncio.get_running_loop()
    interrupts = Interrupts()
    for sig in SIGNALS:
        loop.add_signal_handler(sig, interrupts.received, sig)
    try:
        yield interrupts
    finally:
        for sig in SIGNALS:
            loop.remove_signal_handler(sig)
