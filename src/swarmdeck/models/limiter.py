"""Per-provider concurrency, requests per minute and 429 cooldown, shared by every process on one store."""

from __future__ import annotations

import asyncio
import atexit
import logging
import math
import os
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from swarmdeck.models.limiter_store import Attempt, Lease, Pace, SlotStore
from swarmdeck.models.registry import ProviderConfig

log = logging.getLogger(__name__)

T = TypeVar("T")

# When no slot is free we poll; jitter keeps processes from polling in lockstep.
POLL_MIN_S = 0.02
POLL_MAX_S = 0.05
# Waking everyone at the exact end of a cooldown would be a storm of its own.
WAKE_JITTER_S = 0.05
DB_THREADS = 4
# A slot given back is kept by its process this long before it returns to the store: the
# next call of the same process (the session's next turn) takes it without a write. Other
# processes wait at most this long for it, and a slot kept while they wait is given back.
PARK_S = 0.1
# Kept slots expire on ticks of this length (so they are kept PARK_S to PARK_S + a tick).
EXPIRY_TICK_S = 0.02
# How long the DB thread lets a tick's expiries gather before it frees them.
EXPIRY_GATHER_S = 0.002
# A kept slot is reused without asking the store whether a cooldown began or others wait
# for at most this long after the last time it asked (waiters mark themselves every
# POLL_MIN_S..POLL_MAX_S and stay marked for FAIR_WINDOW_S, so none is missed).
RECHECK_S = 0.05
# A kept slot is reused only while its lease outlives one more call by this much.
REUSE_MARGIN_S = 10.0
# A caller held back by a cooldown at least this long is told (see slot's on_held).
HELD_NOTICE_MIN_S = 0.5

# Told how long a caller will wait for the provider's cooldown, once per call that waits.
HeldCallback = Callable[[float], Awaitable[None]]


def _outlives_a_call(lease: Lease, config: ProviderConfig) -> bool:
    """True while the lease would outlast one more call, with room to spare."""
    return lease.expires - time.monotonic() >= config.timeout_s + REUSE_MARGIN_S


@dataclass(eq=False)
class _Kept:
    """A slot this process holds in the store but is not using, and when it goes back."""

    lease: Lease
    timer: asyncio.TimerHandle | None = None


class ProviderLimiter:
    """Concurrency, rpm and cooldown per provider; shared via the database when given an engine."""

    def __init__(self, engine: Engine | None = None) -> None:
        self._backend: _MemoryBackend | _SqlBackend = (
            _SqlBackend(engine) if engine is not None else _MemoryBackend()
        )
        # Callers of one process queue here first, so at most `concurrency` of them poll the DB.
        self._gates: dict[tuple[str, int], asyncio.Semaphore] = {}

    @asynccontextmanager
    async def slot(
        self, config: ProviderConfig, on_held: HeldCallback | None = None
    ) -> AsyncIterator[None]:
        """Wait for the cooldown, an rpm token and a free slot; hold the slot for the block.

        `on_held` hears how long the provider's cooldown (set by any caller) holds this one
        back, once, when that is at least HELD_NOTICE_MIN_S.
        """
        gate = self._gates.setdefault(
            (config.key, config.concurrency), asyncio.Semaphore(config.concurrency)
        )
        async with gate:
            lease = await self._backend.acquire(config, _Held(on_held))
            try:
                yield
            finally:
                # Shielded: a cancelled call must still give its slot back.
                await asyncio.shield(self._backend.release(lease, config))

    async def cool_down(self, provider: str, seconds: float) -> None:
        """Hold back every caller of `provider` for `seconds` (an earlier, longer cooldown stays)."""
        if seconds > 0:
            await self._backend.cool_down(provider, seconds)

    async def cooldown_remaining(self, provider: str) -> float:
        """Seconds until `provider` may be called again; 0 when not cooling down."""
        return await self._backend.cooldown_remaining(provider)

    def set_owner(self, owner: str) -> None:
        """Name this process's slots after its worker id, so a worker that takes over a dead
        one can free the slots it held (see free_slots_of)."""
        if isinstance(self._backend, _SqlBackend):
            self._backend.owner = owner

    def free_slots_of(self, owners: list[str]) -> int:
        """Free every slot held by these (dead) workers; returns how many were held."""
        if isinstance(self._backend, _SqlBackend) and owners:
            return self._backend.free_slots_of(owners)
        return 0

    def give_back_kept(self) -> None:
        """Return the slots this process keeps between calls to the store (when it stops)."""
        if isinstance(self._backend, _SqlBackend):
            self._backend.give_back_kept()

    def close(self) -> None:
        """Give kept slots back and stop the limiter's database threads."""
        if isinstance(self._backend, _SqlBackend):
            self._backend.close()


@dataclass
class _Held:
    """Tells a caller, once, that a cooldown holds it back."""

    callback: HeldCallback | None
    told: bool = False

    async def cooling(self, seconds: float) -> None:
        """The provider cools down for `seconds` more before this caller may go."""
        if self.callback is None or self.told or seconds < HELD_NOTICE_MIN_S:
            return
        self.told = True
        try:
            await self.callback(seconds)
        except Exception as exc:  # telling must never stop the call
            log.warning("limiter: could not report a cooldown wait: %s", exc)


def _poll_delay(wait: float | None) -> float:
    """How long to sleep before trying again."""
    if wait is None or wait <= 0:
        return random.uniform(POLL_MIN_S, POLL_MAX_S)
    return wait + random.uniform(0, min(WAKE_JITTER_S, wait))


@dataclass
class _MemoryBackend:
    """Single-process limiter for tests and embedded use: the gate is the concurrency cap."""

    next_free: dict[str, float] = field(default_factory=dict)
    cooldown_until: dict[str, float] = field(default_factory=dict)

    async def acquire(self, config: ProviderConfig, held: _Held) -> Lease:
        """Wait out cooldown and rpm spacing."""
        pace = Pace.of(config)
        while True:
            now = time.monotonic()
            cooling = self.cooldown_until.get(config.key, 0.0) - now
            next_free = self.next_free.get(config.key, 0.0)
            pacing = next_free - pace.tolerance - now
            if cooling <= 0 and pacing <= 0:
                self.next_free[config.key] = max(next_free, now) + pace.interval
                return Lease(config.key, holder="local")
            await held.cooling(cooling)
            await asyncio.sleep(_poll_delay(max(cooling, pacing)))

    async def release(self, lease: Lease, config: ProviderConfig) -> None:
        """Nothing to do: the gate is released by the caller."""

    async def cool_down(self, provider: str, seconds: float) -> None:
        """Push the provider's cooldown out to now + seconds."""
        until = time.monotonic() + seconds
        self.cooldown_until[provider] = max(self.cooldown_until.get(provider, 0.0), until)

    async def cooldown_remaining(self, provider: str) -> float:
        """Seconds left of the cooldown."""
        return max(0.0, self.cooldown_until.get(provider, 0.0) - time.monotonic())


class _SqlBackend:
    """The scheduling over the shared store: polling for a slot off the loop, and slots kept
    between one call of this process and its next."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._store = SlotStore(engine)
        self.owner = f"pid-{os.getpid()}"
        # Own small pool: DB waits must not starve the loop's default executor.
        self._executor = ThreadPoolExecutor(DB_THREADS, thread_name_prefix="swarmdeck-limiter")
        self._lock = threading.Lock()
        self._kept: dict[str, list[_Kept]] = {}
        self._checked: dict[str, float] = {}
        # Kept slots that expired, waiting for a DB thread to free them all in one write.
        self._expired: list[Lease] = []
        # A process that ends without close() still gives its kept slots back.
        atexit.register(self.give_back_kept)

    def close(self) -> None:
        """Give kept slots back and shut the DB threads down."""
        self.give_back_kept()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def give_back_kept(self) -> None:
        """Return every kept slot to the store now (blocking: when the process stops)."""
        kept = [k for kept_list in self._kept.values() for k in kept_list]
        self._kept.clear()
        for k in kept:
            if k.timer is not None:
                k.timer.cancel()
        with self._lock:
            self._expired.extend(k.lease for k in kept)
        self._free_expired()

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking DB function off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def acquire(self, config: ProviderConfig, held: _Held) -> Lease:
        """A slot this process kept, if it may be reused; else poll until the cooldown is
        over, an rpm token is free and a slot is ours."""
        kept = await self._reuse(config)
        if kept is not None:
            return kept
        holder = f"{self.owner}/{uuid.uuid4().hex[:16]}"
        fresh = True
        failures = 0
        while True:
            started = time.monotonic()
            try:
                attempt = await self._try_acquire(config, holder, fresh, started)
                failures = 0
            except OperationalError as exc:
                # SQLite's "database is locked" after its busy timeout, or the store is briefly
                # unreachable: try again, and say so once per streak.
                failures += 1
                level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(level, "limiter: store error for %s, retrying: %s", config.key, exc)
                attempt = Attempt()
            if attempt.lease is not None:
                return attempt.lease
            fresh = fresh and not attempt.contended
            await held.cooling(attempt.cooling)
            await asyncio.sleep(_poll_delay(attempt.wait))

    async def _try_acquire(
        self, config: ProviderConfig, holder: str, fresh: bool, started: float
    ) -> Attempt:
        """One try for a slot; a caller cancelled meanwhile gives back the slot the try
        took (its write commits on the DB thread however the caller ends)."""
        loop = asyncio.get_running_loop()
        tried = loop.run_in_executor(
            self._executor, self._store.try_acquire, config, holder, fresh, started
        )
        try:
            return await asyncio.shield(tried)
        except asyncio.CancelledError:
            tried.add_done_callback(self._give_back_taken)
            raise

    def _give_back_taken(self, tried: asyncio.Future[Attempt]) -> None:
        """Callback: free the slot a cancelled caller's try took, if it took one."""
        if tried.cancelled() or tried.exception() is not None:
            return
        lease = tried.result().lease
        if lease is not None:
            self._free_soon(lease)

    async def release(self, lease: Lease, config: ProviderConfig) -> None:
        """Keep the slot for this process's next call for a moment (see PARK_S)."""
        if not _outlives_a_call(lease, config):
            await self._give_back(lease)
            return
        kept = _Kept(lease)
        loop = asyncio.get_running_loop()
        # On a tick, so that the slots given back within one expire together (one write).
        due = math.ceil((loop.time() + PARK_S) / EXPIRY_TICK_S) * EXPIRY_TICK_S
        kept.timer = loop.call_at(due, self._expire, kept)
        self._kept.setdefault(lease.provider, []).append(kept)

    async def _reuse(self, config: ProviderConfig) -> Lease | None:
        """A kept slot, unless a cooldown began or others wait for slots (then it goes back)."""
        kept_list = self._kept.get(config.key)
        if not kept_list:
            return None
        kept = kept_list.pop()
        if kept.timer is not None:
            kept.timer.cancel()
        lease = kept.lease
        if not _outlives_a_call(lease, config):
            await self._give_back(lease)
            return None
        pace = Pace.of(config)
        checked = self._checked.get(config.key, float("-inf"))
        if pace.interval or time.monotonic() - checked > RECHECK_S:
            checking = time.monotonic()
            try:
                clear = await self._run(self._store.may_reuse, config, pace)
            except OperationalError:
                clear = False
            if not clear:
                await self._give_back(lease)
                return None
            self._checked[config.key] = checking
        return lease

    def _expire(self, kept: _Kept) -> None:
        """Timer: a kept slot nobody reused returns to the store."""
        kept_list = self._kept.get(kept.lease.provider, [])
        if kept in kept_list:
            kept_list.remove(kept)
            self._free_soon(kept.lease)

    def _free_soon(self, lease: Lease) -> None:
        """Free the slot on a DB thread, in one write with the others freed meanwhile."""
        with self._lock:
            self._expired.append(lease)
            first = len(self._expired) == 1
        if not first:
            return
        # Straight to the DB threads, not an asyncio task or a loop callback: a loop that
        # ends meanwhile (a CLI run finishing, or one asyncio.run of several) must neither
        # drop the batch nor leave it unsent for the next loop's slots.
        try:
            self._executor.submit(self._free_expired)
        except RuntimeError:  # the limiter closed meanwhile: the leases expire by themselves
            log.debug("limiter: closed before %d slots went back", len(self._expired))

    def _free_expired(self) -> None:
        """Free the slot rows of every expired kept slot, one write for all; on failure
        their leases expire by themselves."""
        # The others due at this tick expire in the same turn of the loop: let them join.
        time.sleep(EXPIRY_GATHER_S)
        with self._lock:
            leases, self._expired = self._expired, []
        if not leases:
            return
        try:
            self._store.release_holders([x.holder for x in leases])
        except (OperationalError, DBAPIError) as exc:
            log.debug("limiter: freeing %d kept slots failed: %s", len(leases), exc)

    async def _give_back(self, lease: Lease) -> None:
        """Free the slot if it is still ours (an expired lease may have been taken over)."""
        for delay in (0.0, 0.05, 0.2, 1.0):
            await asyncio.sleep(delay)
            try:
                await self._run(self._store.release, lease)
                return
            except OperationalError as exc:
                log.debug("limiter: release for %s failed: %s", lease.provider, exc)
        log.warning(
            "limiter: could not free a %s slot; it frees itself when its lease expires",
            lease.provider,
        )

    async def cool_down(self, provider: str, seconds: float) -> None:
        """Push the provider's shared cooldown out to now + seconds."""
        self._checked.pop(provider, None)  # the next reuse of a kept slot asks the store
        await self._run(self._store.cool_down, provider, seconds)

    async def cooldown_remaining(self, provider: str) -> float:
        """Seconds left of the shared cooldown."""
        return await self._run(self._store.cooldown_remaining, provider)

    def free_slots_of(self, owners: list[str]) -> int:
        """Free the slots whose holder belongs to one of these owners (blocking)."""
        return self._store.free_slots_of(owners)
