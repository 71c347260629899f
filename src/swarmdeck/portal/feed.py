"""One watcher of the store for every open page: a single loop reads the store's marks a
few times a second and wakes the pages whose sessions changed, so a hundred open pages
cost one poll, not a hundred."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

from starlette.concurrency import run_in_threadpool

from swarmdeck.catalog.overview import Overview, StoreMarks

log = logging.getLogger(__name__)

# How often the one loop looks: a stored event reaches an open page within about this.
POLL_S = 0.2


class StoreFeed:
    """Wakes subscribers (one asyncio.Event each) when their session changes."""

    def __init__(self, overview: Overview, poll_s: float = POLL_S) -> None:
        self.overview = overview
        self.poll_s = poll_s
        self._subscribers: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._fleet: set[asyncio.Event] = set()
        self._marks: StoreMarks | None = None
        self._task: asyncio.Task[None] | None = None

    def subscribe(self, session_id: str | None) -> asyncio.Event:
        """An event set whenever this session (None: any session) changes."""
        bell = asyncio.Event()
        (self._fleet if session_id is None else self._subscribers[session_id]).add(bell)
        return bell

    def unsubscribe(self, session_id: str | None, bell: asyncio.Event) -> None:
        """Stop waking this subscriber."""
        if session_id is None:
            self._fleet.discard(bell)
            return
        bells = self._subscribers.get(session_id)
        if bells is not None:
            bells.discard(bell)
            if not bells:
                del self._subscribers[session_id]

    @property
    def watched(self) -> int:
        """How many subscribers wait now."""
        return len(self._fleet) + sum(len(b) for b in self._subscribers.values())

    def start(self) -> None:
        """Start the one loop (inside the server's event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop the loop."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                if self.watched:
                    await self._look()
                else:
                    self._marks = None  # nobody watches: read afresh when somebody does
            except Exception as exc:  # a store hiccup must not end the feed for every page
                log.warning("the portal's store feed failed a look: %s", exc)
            await asyncio.sleep(self.poll_s)

    async def _look(self) -> None:
        marks = await run_in_threadpool(self.overview.marks)
        before, self._marks = self._marks, marks
        if before is None or marks == before:
            return
        for bell in self._fleet:
            bell.set()
        if not self._subscribers:
            return
        changed = await run_in_threadpool(
            self.overview.touched_since, before.last_event_id, before.last_update
        )
        for session_id in changed & self._subscribers.keys():
            for bell in self._subscribers[session_id]:
                bell.set()
