"""A worker's periodic duties: take sessions handed to the fleet, take over the dead, ring
the sessions that got mail, stop what a follower cancelled. One loop runs them all; more
are added as Duty entries (the plugins' system agents, say)."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from swarmdeck.catalog.changes import StoreChanges
from swarmdeck.catalog.inbox import read_mail_note

if TYPE_CHECKING:
    from swarmdeck.runtime.engine import Engine

log = logging.getLogger(__name__)

RECOVER_SECONDS = 0.25
SWEEP_SECONDS = 2.0
INBOX_SECONDS = 0.05
# A fallback poll of the inbox where NOTIFY tells the worker of each message at once.
NOTIFIED_INBOX_SECONDS = 0.5
INBOX_LOOKBACK = 1000
CANCEL_SECONDS = 0.25
FORGET_SECONDS = 600.0
# A fallback poll for hand-overs where NOTIFY tells the worker of them at once.
NOTIFIED_HANDOVER_SECONDS = 0.5


@dataclass
class Duty:
    """Something a worker does every `every_s` seconds (or when woken)."""

    name: str
    every_s: float
    run: Callable[[], Awaitable[Any]]
    next_at: float = 0.0
    # Set from any thread to run the duty at once (a NOTIFY, say).
    wake: bool = False


@dataclass
class DutyLoop:
    """Runs duties on time until stopped; a duty that fails is logged and run again later."""

    duties: list[Duty] = field(default_factory=list)
    _woken: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    def add(self, duty: Duty) -> Duty:
        """Register a duty; returns it (to wake it later)."""
        self.duties.append(duty)
        return duty

    def wake(self, duty: Duty) -> None:
        """Run the duty as soon as possible; safe to call from any thread."""
        duty.wake = True
        if self._loop is not None and self._woken is not None:
            self._loop.call_soon_threadsafe(self._woken.set)

    async def serve(self, stop: asyncio.Event) -> None:
        """Run the duties until `stop` is set."""
        self._loop = asyncio.get_running_loop()
        self._woken = asyncio.Event()
        while not stop.is_set():
            now = time.monotonic()
            for duty in self.duties:
                if duty.wake or now >= duty.next_at:
                    duty.wake = False
                    duty.next_at = now + duty.every_s
                    try:
                        await duty.run()
                    except Exception as exc:  # one failed round must not end the worker
                        log.warning("worker duty %s failed: %s", duty.name, exc)
            delay = max(0.0, min(d.next_at for d in self.duties) - time.monotonic())
            self._woken.clear()
            if any(d.wake for d in self.duties):
                continue
            sleeper = asyncio.ensure_future(self._woken.wait())
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({sleeper, stopper}, timeout=delay, return_when="FIRST_COMPLETED")
            finally:
                sleeper.cancel()
                stopper.cancel()


class FleetDuties:
    """The duties every fleet worker keeps (see `fleet_loop`)."""

    def __init__(self, engine: Engine, say: Callable[[str], None], notified: bool) -> None:
        self.engine = engine
        self.catalog = engine.services.catalog
        self.say = say
        # Mail NOTIFY named (message id, session id), from the listener's thread; the inbox
        # is read only every NOTIFIED_INBOX_SECONDS then, for what a NOTIFY missed.
        self._heard: collections.deque[tuple[int, str]] = collections.deque()
        self._look_every = NOTIFIED_INBOX_SECONDS if notified else 0.0
        self._looked = float("-inf")
        # On SQLite the frequent polls first ask whether anything was written at all.
        db = self.catalog.engine.url.database
        on_file = self.catalog.is_sqlite and db and db != ":memory:"
        self.changes = StoreChanges(db) if on_file else None
        self._inbox_cursor = self.catalog.last_inbox_id()
        self._rung: set[int] = set()
        self._cancel_since = time.time()

    async def take_handovers(self) -> None:
        """Sessions handed to the fleet go on its queue (any worker may run them)."""
        if self.changes is not None and not self.changes.changed("handovers"):
            return
        try:
            taken = await asyncio.to_thread(self.engine.take_handovers)
        except Exception:
            if self.changes is not None:
                self.changes.forget("handovers")
            raise
        if taken:
            log.info("took %d handed-over session(s)", len(taken))

    async def recover(self) -> None:
        """Take over the sessions of executors whose lease lapsed."""
        claimed = await asyncio.to_thread(self.engine.recover_dead_workers)
        if claimed:
            self.say(f"took over the sessions of {', '.join(claimed)}")

    async def sweep(self) -> None:
        """Executors taken over lately may have started work after the takeover (a paused
        worker waking up): put it back on the queue too."""
        recent = await asyncio.to_thread(self.engine.workers.recently_taken_over)
        if recent:
            await asyncio.to_thread(self.engine.requeue_work_of, recent)

    def hear_mail(self, note: str) -> None:
        """A mail NOTIFY's payload (called from the listener's thread)."""
        heard = read_mail_note(note)
        if heard is not None:
            self._heard.append(heard)
        else:  # the listener (re)started: what came meanwhile went unheard
            self._looked = float("-inf")

    async def ring_mail(self) -> None:
        """Wake this worker's sessions that got messages from a process without an engine:
        those a NOTIFY named that run here at once, with no read; the others a look at the
        inbox finds (at each poll on SQLite, every NOTIFIED_INBOX_SECONDS on PostgreSQL)."""
        await self._ring_heard()
        if time.monotonic() - self._looked < self._look_every:
            return
        self._looked = time.monotonic()
        await self._ring_found()

    async def _ring_heard(self) -> None:
        """Ring the sessions the NOTIFYs named that run here (another worker rings its own)."""
        heard = []
        while self._heard:
            heard.append(self._heard.popleft())
        fresh = [(mid, sid) for mid, sid in heard if mid not in self._rung]
        rang = await asyncio.gather(*(self.engine.ring_if_here(sid) for _mid, sid in fresh))
        self._rung.update(mid for (mid, _sid), here in zip(fresh, rang, strict=True) if here)

    async def _ring_found(self) -> None:
        """Ring the sessions of this worker with mail not rung yet, read from the inbox.

        The cursor trails the newest message seen: on PostgreSQL ids are handed out before
        commit, so a message may land below one already seen."""
        if self.changes is not None and not self.changes.changed("mail"):
            return
        try:
            newest, rows = await asyncio.to_thread(
                self.catalog.mail_since, self._inbox_cursor, self.engine.executor_id
            )
        except Exception:
            if self.changes is not None:
                self.changes.forget("mail")
            raise
        fresh = [(mid, sid) for mid, sid in rows if mid not in self._rung]
        self._rung.update(mid for mid, _sid in fresh)
        # At once: fifty messages a second rung one after another queued behind each
        # other's store round trip.
        await asyncio.gather(*(self.engine.ring(sid) for sid in sorted({s for _m, s in fresh})))
        self._inbox_cursor = max(self._inbox_cursor, newest - INBOX_LOOKBACK)
        self._rung = {mid for mid in self._rung if mid > self._inbox_cursor}

    async def stop_cancelled(self) -> None:
        """Stop the workflows of sessions a follower without an engine cancelled."""
        since, self._cancel_since = self._cancel_since, time.time()
        ids = await asyncio.to_thread(
            self.catalog.cancelled_since, since - 1.0, self.engine.executor_id
        )
        if ids:
            await self.engine.cancel(ids)

    async def forget(self) -> None:
        """Drop the rows of executors taken over long ago."""
        await asyncio.to_thread(self.engine.workers.forget_old)


def fleet_loop(
    engine: Engine, say: Callable[[str], None], notified: bool
) -> tuple[DutyLoop, Duty, Callable[[str], None]]:
    """A worker's duty loop; returns it with the hand-over duty and what hears a mail
    NOTIFY's payload (both woken by NOTIFY where `notified`)."""
    fleet = FleetDuties(engine, say, notified)
    settings = engine.services.settings
    loop = DutyLoop()
    every = NOTIFIED_HANDOVER_SECONDS if notified else settings.handover_poll_seconds
    handover = loop.add(Duty("take handovers", every, fleet.take_handovers))
    loop.add(Duty("recover", RECOVER_SECONDS, fleet.recover))
    loop.add(Duty("sweep", SWEEP_SECONDS, fleet.sweep))
    mail = loop.add(
        Duty("ring mail", NOTIFIED_INBOX_SECONDS if notified else INBOX_SECONDS, fleet.ring_mail)
    )
    loop.add(Duty("stop cancelled", CANCEL_SECONDS, fleet.stop_cancelled))
    loop.add(Duty("forget", FORGET_SECONDS, fleet.forget))

    def hear_mail(note: str) -> None:
        fleet.hear_mail(note)
        loop.wake(mail)

    return loop, handover, hear_mail
