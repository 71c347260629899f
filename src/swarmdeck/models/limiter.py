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

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Double,
    Engine,
    Integer,
    MetaData,
    Select,
    String,
    Table,
    Update,
    bindparam,
    case,
    literal_column,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.schema import CreateTable

from swarmdeck.models.registry import ProviderConfig

log = logging.getLogger(__name__)

T = TypeVar("T")

# When no slot is free we poll; jitter keeps processes from polling in lockstep.
POLL_MIN_S = 0.02
POLL_MAX_S = 0.05
# While someone failed to get a slot this recently, newcomers queue behind the pollers: a
# process with local waiters would otherwise win every hand-over and starve the others.
FAIR_WINDOW_S = 0.1
# Waking everyone at the exact end of a cooldown would be a storm of its own.
WAKE_JITTER_S = 0.05
# A lease outlives the call's timeout a little, so only a crashed holder's slot is reclaimed.
LEASE_MARGIN_S = 60.0
DB_THREADS = 4
# Tries at creating the limiter's tables while other processes may be creating them too.
SCHEMA_ATTEMPTS = 3
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

metadata = MetaData()

limiter_slots = Table(
    "limiter_slots",
    metadata,
    Column("provider", String(64), primary_key=True),
    Column("idx", Integer, primary_key=True, autoincrement=False),
    Column("holder", String(64), nullable=True),
    Column("expires_at", Double, nullable=False, default=0.0),
)

limiter_state = Table(
    "limiter_state",
    metadata,
    Column("provider", String(64), primary_key=True),
    # Generic cell rate algorithm: the earliest time the next request may go, minus the burst.
    Column("next_free", Double, nullable=False, default=0.0),
    Column("cooldown_until", Double, nullable=False, default=0.0),
    # When a caller last found no free slot: the sign that others are waiting.
    Column("contended_at", Double, nullable=False, default=0.0),
)


@dataclass(frozen=True)
class _Pace:
    """Rate parameters of one provider: spacing between requests and the burst allowed."""

    interval: float
    tolerance: float

    @classmethod
    def of(cls, config: ProviderConfig) -> _Pace:
        """No rpm means no spacing; otherwise up to `concurrency` requests may go at once."""
        if not config.rpm:
            return cls(0.0, 0.0)
        interval = 60.0 / config.rpm
        burst = max(1, min(config.concurrency, config.rpm))
        return cls(interval, (burst - 1) * interval)


@dataclass(frozen=True)
class _Lease:
    """A held slot; `idx` is None for the in-process backend. `expires` is a lower bound of
    the lease's end on this process's monotonic clock."""

    provider: str
    holder: str
    idx: int | None = None
    expires: float = 0.0


@dataclass(frozen=True)
class _Attempt:
    """The outcome of one try: a lease, or how long to wait (None: poll shortly)."""

    lease: _Lease | None = None
    wait: float | None = None
    # No slot was free: the caller waits its turn among the pollers.
    contended: bool = False
    # Seconds left of the provider's cooldown, when that is what holds the caller back.
    cooling: float = 0.0


def _outlives_a_call(lease: _Lease, config: ProviderConfig) -> bool:
    """True while the lease would outlast one more call, with room to spare."""
    return lease.expires - time.monotonic() >= config.timeout_s + REUSE_MARGIN_S


@dataclass(eq=False)
class _Kept:
    """A slot this process holds in the store but is not using, and when it goes back."""

    lease: _Lease
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

    async def acquire(self, config: ProviderConfig, held: _Held) -> _Lease:
        """Wait out cooldown and rpm spacing."""
        pace = _Pace.of(config)
        while True:
            now = time.monotonic()
            cooling = self.cooldown_until.get(config.key, 0.0) - now
            next_free = self.next_free.get(config.key, 0.0)
            pacing = next_free - pace.tolerance - now
            if cooling <= 0 and pacing <= 0:
                self.next_free[config.key] = max(next_free, now) + pace.interval
                return _Lease(config.key, holder="local")
            await held.cooling(cooling)
            await asyncio.sleep(_poll_delay(max(cooling, pacing)))

    async def release(self, lease: _Lease, config: ProviderConfig) -> None:
        """Nothing to do: the gate is released by the caller."""

    async def cool_down(self, provider: str, seconds: float) -> None:
        """Push the provider's cooldown out to now + seconds."""
        until = time.monotonic() + seconds
        self.cooldown_until[provider] = max(self.cooldown_until.get(provider, 0.0), until)

    async def cooldown_remaining(self, provider: str) -> float:
        """Seconds left of the cooldown."""
        return max(0.0, self.cooldown_until.get(provider, 0.0) - time.monotonic())


@dataclass(frozen=True)
class _Statements:
    """The limiter's SQL, built once with bound parameters (building it costs more than running it)."""

    take_token: Update
    waits: Select[Any]
    take_slot: Update
    release: Update
    release_all: Update
    contend: Update
    cool_down: Update
    remaining: Select[Any]
    held_back: Select[Any]
    client_clock: bool

    @classmethod
    def build(cls, dialect: str) -> _Statements:
        """Statements for a dialect; the clock is the database's where we know how to read it."""
        now: ColumnElement[float]
        if dialect == "sqlite":
            now = literal_column("((julianday('now') - 2440587.5) * 86400.0)", Double)
        elif dialect == "postgresql":
            now = literal_column(
                "CAST(EXTRACT(EPOCH FROM statement_timestamp()) AS DOUBLE PRECISION)", Double
            )
        else:
            now = bindparam("b_now", type_=Double)
        state, slots = limiter_state.c, limiter_slots.c
        provider = bindparam("b_provider", type_=String)
        tolerance = bindparam("b_tolerance", type_=Double)
        spare = limiter_slots.alias("spare")
        free = slots.holder.is_(None) | (slots.expires_at < now)
        spare_free = spare.c.holder.is_(None) | (spare.c.expires_at < now)
        # SKIP LOCKED (PostgreSQL; SQLite has one writer anyway) lets concurrent takers pick
        # different free rows instead of queueing on the lowest one.
        candidate = (
            select(spare.c.idx)
            .where(
                spare.c.provider == provider,
                spare.c.idx < bindparam("b_count", type_=Integer),
                spare_free,
            )
            .order_by(spare.c.idx)
            .limit(1)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        # The provider cools down, or someone found no slot within the fair window: a
        # newcomer (b_fair_window > 0) waits, and a kept slot goes back.
        held_back = select(state.provider).where(
            state.provider == provider,
            (state.cooldown_until > now)
            | (state.contended_at > now - bindparam("b_fair_window", type_=Double)),
        )
        until = now + bindparam("b_seconds", type_=Double)
        return cls(
            take_token=update(limiter_state)
            .where(
                state.provider == provider,
                state.cooldown_until <= now,
                state.next_free <= now + tolerance,
            )
            .values(
                next_free=case((state.next_free > now, state.next_free), else_=now)
                + bindparam("b_interval", type_=Double)
            ),
            waits=select(state.cooldown_until - now, state.next_free - tolerance - now).where(
                state.provider == provider
            ),
            take_slot=update(limiter_slots)
            .where(slots.provider == provider, slots.idx == candidate, free, ~held_back.exists())
            .values(
                holder=bindparam("b_holder", type_=String),
                expires_at=now + bindparam("b_lease", type_=Double),
            )
            .returning(slots.idx),
            release=update(limiter_slots)
            .where(
                slots.provider == provider,
                slots.idx == bindparam("b_idx", type_=Integer),
                slots.holder == bindparam("b_holder", type_=String),
            )
            .values(holder=None, expires_at=0.0),
            # Each holder names one lease of one slot: a slot retaken since is not touched.
            release_all=update(limiter_slots)
            .where(slots.holder.in_(bindparam("b_holders", expanding=True)))
            .values(holder=None, expires_at=0.0),
            contend=update(limiter_state)
            .where(state.provider == provider)
            .values(contended_at=now),
            cool_down=update(limiter_state)
            .where(state.provider == provider)
            .values(
                cooldown_until=case(
                    (state.cooldown_until > until, state.cooldown_until), else_=until
                )
            ),
            remaining=select(state.cooldown_until - now).where(state.provider == provider),
            held_back=held_back,
            client_clock=dialect not in ("sqlite", "postgresql"),
        )


class _SqlBackend:
    """Slots, rpm and cooldown as rows, changed by atomic UPDATEs; clocks come from the database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.owner = f"pid-{os.getpid()}"
        # Own small pool: DB waits must not starve the loop's default executor.
        self._executor = ThreadPoolExecutor(DB_THREADS, thread_name_prefix="swarmdeck-limiter")
        self._ready: set[tuple[str, int]] = set()
        self._tables_ready = False
        self._schema_lock = threading.Lock()
        self._lock = threading.Lock()
        self._statements = _Statements.build(engine.dialect.name)
        self._kept: dict[str, list[_Kept]] = {}
        self._checked: dict[str, float] = {}
        # Kept slots that expired, waiting for a DB thread to free them all in one write.
        self._expired: list[_Lease] = []
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

    async def acquire(self, config: ProviderConfig, held: _Held) -> _Lease:
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
                attempt = await self._run(self._try_acquire, config, holder, fresh, started)
                failures = 0
            except OperationalError as exc:
                # SQLite's "database is locked" after its busy timeout, or the store is briefly
                # unreachable: try again, and say so once per streak.
                failures += 1
                level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(level, "limiter: store error for %s, retrying: %s", config.key, exc)
                attempt = _Attempt()
            if attempt.lease is not None:
                return attempt.lease
            fresh = fresh and not attempt.contended
            await held.cooling(attempt.cooling)
            await asyncio.sleep(_poll_delay(attempt.wait))

    async def release(self, lease: _Lease, config: ProviderConfig) -> None:
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

    async def _reuse(self, config: ProviderConfig) -> _Lease | None:
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
        pace = _Pace.of(config)
        checked = self._checked.get(config.key, float("-inf"))
        if pace.interval or time.monotonic() - checked > RECHECK_S:
            checking = time.monotonic()
            try:
                clear = await self._run(self._may_reuse, config, pace)
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
            with self._lock:
                self._expired.append(kept.lease)
                first = len(self._expired) == 1
            if first:
                # Straight to the DB threads, not an asyncio task or a loop callback: a loop
                # that ends meanwhile (a CLI run finishing, or one asyncio.run of several)
                # must neither drop the batch nor leave it unsent for the next loop's slots.
                self._executor.submit(self._free_expired)

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
            with self._engine.begin() as conn:
                conn.execute(
                    self._statements.release_all, {"b_holders": [x.holder for x in leases]}
                )
        except (OperationalError, DBAPIError) as exc:
            log.debug("limiter: freeing %d kept slots failed: %s", len(leases), exc)

    async def _give_back(self, lease: _Lease) -> None:
        """Free the slot if it is still ours (an expired lease may have been taken over)."""
        for delay in (0.0, 0.05, 0.2, 1.0):
            await asyncio.sleep(delay)
            try:
                await self._run(self._release, lease)
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
        await self._run(self._cool_down, provider, seconds)

    async def cooldown_remaining(self, provider: str) -> float:
        """Seconds left of the shared cooldown."""
        return await self._run(self._cooldown_remaining, provider)

    # --- blocking parts, run in the executor -------------------------------------------------

    def _params(self, **values: Any) -> dict[str, Any]:
        """Bound values, plus the client clock for databases whose clock we cannot read."""
        if self._statements.client_clock:
            values["b_now"] = time.time()
        return values

    def _take_token(self, conn: Connection, config: ProviderConfig, pace: _Pace) -> bool:
        """Take an rpm token in the caller's transaction; False when none is due yet."""
        token = conn.execute(
            self._statements.take_token,
            self._params(
                b_provider=config.key, b_tolerance=pace.tolerance, b_interval=pace.interval
            ),
        )
        return token.rowcount != 0

    def _may_reuse(self, config: ProviderConfig, pace: _Pace) -> bool:
        """One transaction: True when the provider is not cooling down, nobody waited for a
        slot lately, and (with an rpm) a token was taken."""
        sql = self._statements
        with self._engine.connect() as conn:
            if pace.interval and not self._take_token(conn, config, pace):
                return False
            busy = conn.execute(
                sql.held_back, self._params(b_provider=config.key, b_fair_window=FAIR_WINDOW_S)
            ).first()
            if busy is not None:
                return False  # the rollback gives the token back
            conn.commit()
            return True

    def _try_acquire(
        self, config: ProviderConfig, holder: str, fresh: bool = False, started: float = 0.0
    ) -> _Attempt:
        """One transaction: an rpm token (if the provider has an rpm), then a free slot, both
        only when the provider is not cooling down."""
        self._ensure(config)
        pace = _Pace.of(config)
        sql = self._statements
        with self._engine.connect() as conn:
            # Each first statement writes, so SQLite takes its write lock there (waiting under
            # busy_timeout) instead of failing on a later read-to-write upgrade.
            if pace.interval and not self._take_token(conn, config, pace):
                return self._wait_for(conn, config, pace, slot_taken=False)
            taken = conn.execute(
                sql.take_slot,
                self._params(
                    b_provider=config.key,
                    b_count=config.concurrency,
                    b_holder=holder,
                    b_lease=config.timeout_s + LEASE_MARGIN_S,
                    b_fair_window=FAIR_WINDOW_S if fresh else -1.0,
                ),
            ).first()
            if taken is None:
                # Busy or cooling down; the rollback also gives the rpm token back.
                return self._wait_for(conn, config, pace, slot_taken=True)
            conn.commit()
            expires = started + config.timeout_s + LEASE_MARGIN_S
            return _Attempt(lease=_Lease(config.key, holder, int(taken[0]), expires))

    def _wait_for(
        self, conn: Connection, config: ProviderConfig, pace: _Pace, *, slot_taken: bool
    ) -> _Attempt:
        """Roll back and say how long the cooldown or rpm spacing lasts; or, when the slots
        were all taken, mark the provider contended and poll."""
        cooling, spacing = conn.execute(
            self._statements.waits,
            self._params(b_provider=config.key, b_tolerance=pace.tolerance),
        ).one()
        conn.rollback()
        wait = max(float(cooling), float(spacing) if pace.interval else 0.0)
        if wait > 0 or not slot_taken:
            # Spacing that ran out between the two statements just means "try again now".
            return _Attempt(wait=wait if wait > 0 else 0.001, cooling=max(0.0, float(cooling)))
        # Not cooling down, so every slot is taken: tell newcomers to queue.
        conn.execute(self._statements.contend, self._params(b_provider=config.key))
        conn.commit()
        return _Attempt(contended=True)

    def _release(self, lease: _Lease) -> None:
        """Free our slot row."""
        with self._engine.begin() as conn:
            conn.execute(
                self._statements.release,
                {"b_provider": lease.provider, "b_idx": lease.idx, "b_holder": lease.holder},
            )

    def free_slots_of(self, owners: list[str]) -> int:
        """Free the slots whose holder belongs to one of these owners."""
        self._create_tables()
        slots = limiter_slots.c
        with self._engine.begin() as conn:
            return sum(
                conn.execute(
                    update(limiter_slots)
                    .where(slots.holder.startswith(f"{owner}/", autoescape=True))
                    .values(holder=None, expires_at=0.0)
                ).rowcount
                for owner in owners
            )

    def _cool_down(self, provider: str, seconds: float) -> None:
        """Set cooldown_until to the later of its value and now + seconds."""
        self._ensure_state(provider)
        with self._engine.begin() as conn:
            conn.execute(
                self._statements.cool_down, self._params(b_provider=provider, b_seconds=seconds)
            )

    def _cooldown_remaining(self, provider: str) -> float:
        """Seconds left of the cooldown, 0 when there is none."""
        self._create_tables()
        with self._engine.connect() as conn:
            left = conn.execute(
                self._statements.remaining, self._params(b_provider=provider)
            ).scalar()
        return max(0.0, float(left or 0.0))

    # --- schema and rows, created on first use -----------------------------------------------

    def _ensure(self, config: ProviderConfig) -> None:
        """Tables, the provider's state row and its slot rows exist (checked once per process)."""
        marker = (config.key, config.concurrency)
        if marker in self._ready:
            return
        self._ensure_state(config.key)
        rows = [
            {"provider": config.key, "idx": i, "holder": None, "expires_at": 0.0}
            for i in range(config.concurrency)
        ]
        self._insert_missing(limiter_slots, rows)
        with self._lock:
            self._ready.add(marker)

    def _ensure_state(self, provider: str) -> None:
        """The provider's state row exists."""
        if (provider, -1) in self._ready:
            return
        self._create_tables()
        self._insert_missing(
            limiter_state, [{"provider": provider, "next_free": 0.0, "cooldown_until": 0.0}]
        )
        with self._lock:
            self._ready.add((provider, -1))

    def _create_tables(self) -> None:
        """Create the limiter tables if missing, once per process; another process creating
        them at the same moment is fine."""
        if self._tables_ready:
            return
        # The DB threads of one process meet here on a fresh store; pysqlite runs DDL outside
        # a transaction, so a check-then-create lost the race as "already exists".
        with self._schema_lock:
            if self._tables_ready:
                return
            for attempt in range(SCHEMA_ATTEMPTS):
                try:
                    with self._engine.begin() as conn:
                        for table in metadata.sorted_tables:
                            conn.execute(CreateTable(table, if_not_exists=True))
                    break
                except DBAPIError:
                    # PostgreSQL: two processes' IF NOT EXISTS can still collide (on the
                    # row type's name); the loser finds the table there when it asks again.
                    if attempt == SCHEMA_ATTEMPTS - 1:
                        raise
            self._tables_ready = True

    def _insert_missing(self, table: Table, rows: list[dict[str, Any]]) -> None:
        """Insert rows whose primary key is not there yet, atomically against other processes."""
        dialect = self._engine.dialect.name
        with self._engine.begin() as conn:
            if dialect in ("sqlite", "postgresql"):
                if dialect == "sqlite":
                    from sqlalchemy.dialects.sqlite import insert
                else:
                    from sqlalchemy.dialects.postgresql import insert
                conn.execute(insert(table).on_conflict_do_nothing(), rows)
                return
            keys = [c.name for c in table.primary_key.columns]
            for row in rows:
                found = conn.execute(
                    select(*table.primary_key.columns).where(*(table.c[k] == row[k] for k in keys))
                ).first()
                if found is None:
                    conn.execute(table.insert(), [row])
