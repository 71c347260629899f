"""What a model turn tells the catalog while it runs, so watchers in any process see it.

Two things: that the model is still answering (streamed chunks of any kind), as a touch of
the session's `active_at`, at most once a second and only once the turn has run for that
long, so a quick turn writes nothing extra (counted from the turn's start, not its first
chunk: the first chunk after a long wait for the answer is the sign of life that
dispatch's idle watchdog reads); and every wait the model layer takes (a
retry's backoff, a cooldown), as a `notice` entry in the transcript, with its reason and
its length. Neither may fail the turn: a touch that finds the store busy is skipped (a
chunk a moment later tries again), and a notice that cannot be written is logged.
"""

from __future__ import annotations

import asyncio
import logging
import time

from swarmdeck.catalog.catalog import WriteWouldWait
from swarmdeck.models.types import Notice
from swarmdeck.runtime.services import services

log = logging.getLogger(__name__)

TOUCH_EVERY_S = 1.0
# After a touch skipped on a busy store, the next try waits this long: retrying at every
# chunk found the store busy again and again (1,000 sessions streaming on a loaded loop:
# 0.5 s of the loop's time went into touches, for 357 that landed).
RETRY_BUSY_S = 0.25
NOTICE_KIND = "notice"


def notice_key(turn: int, generation: int, n: int) -> str:
    """The transcript key of a turn's n-th notice in one generation (a rerun after a crash
    writes the same keys, so its notices are not doubled)."""
    return f"turn:{turn}:g{generation}:notice:{n}"


class TurnWatch:
    """The listeners the runtime hands the model layer for one turn."""

    def __init__(self, session_id: str, turn: int, generation: int) -> None:
        self.session_id = session_id
        self.turn = turn
        self.generation = generation
        self._last_touch = time.monotonic()
        self._notices = 0

    async def chunk(self) -> None:
        """A chunk of the answer arrived: touch the session, at most once a second."""
        now = time.monotonic()
        if now - self._last_touch < TOUCH_EVERY_S:
            return
        catalog = services().catalog
        try:
            if catalog.is_sqlite:
                # On the loop, without waiting: a busy store only skips this touch.
                catalog.touch_active(self.session_id, wait=False)
            else:
                await asyncio.to_thread(catalog.touch_active, self.session_id)
        except WriteWouldWait:
            self._last_touch = now - TOUCH_EVERY_S + RETRY_BUSY_S
            return
        except Exception as exc:
            log.warning("could not record activity of %s: %s", self.session_id, exc)
        self._last_touch = now

    async def notice(self, notice: Notice) -> None:
        """The model layer is about to wait: say so in the transcript."""
        self._notices += 1
        key = notice_key(self.turn, self.generation, self._notices)
        catalog = services().catalog
        try:
            await asyncio.to_thread(
                catalog.append_event, self.session_id, key, NOTICE_KIND, notice.as_dict()
            )
        except Exception as exc:
            log.warning("could not record a notice of %s: %s", self.session_id, exc)
