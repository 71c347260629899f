"""The limiter's store: its tables, its SQL, and the one-transaction operations on them
(take a slot and an rpm token, give a slot back, set or read a cooldown).

Blocking, so the scheduling side (limiter.py) runs them on its own threads. Clocks are the
database's where we know how to read them, so processes on different hosts agree."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

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
from sqlalchemy.exc import DBAPIError
from sqlalchemy.schema import CreateTable

from swarmdeck.catalog.db import read_engine
from swarmdeck.models.registry import ProviderConfig

# While someone failed to get a slot this recently, newcomers queue behind the pollers: a
# process with local waiters would otherwise win every hand-over and starve the others.
FAIR_WINDOW_S = 0.1
# A lease outlives the call's timeout a little, so only a crashed holder's slot is reclaimed.
LEASE_MARGIN_S = 60.0
# Tries at creating the limiter's tables while other processes may be creating them too.
SCHEMA_ATTEMPTS = 3

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
class Pace:
    """Rate parameters of one provider: spacing between requests and the burst allowed."""

    interval: float
    tolerance: float

    @classmethod
    def of(cls, config: ProviderConfig) -> Pace:
        """No rpm means no spacing; otherwise up to `concurrency` requests may go at once."""
        if not config.rpm:
            return cls(0.0, 0.0)
        interval = 60.0 / config.rpm
        burst = max(1, min(config.concurrency, config.rpm))
        return cls(interval, (burst - 1) * interval)


@dataclass(frozen=True)
class Lease:
    """A held slot; `idx` is None for the in-process backend. `expires` is a lower bound of
    the lease's end on this process's monotonic clock."""

    provider: str
    holder: str
    idx: int | None = None
    expires: float = 0.0


@dataclass(frozen=True)
class Attempt:
    """The outcome of one try: a lease, or how long to wait (None: poll shortly)."""

    lease: Lease | None = None
    wait: float | None = None
    # No slot was free: the caller waits its turn among the pollers.
    contended: bool = False
    # Seconds left of the provider's cooldown, when that is what holds the caller back.
    cooling: float = 0.0


@dataclass(frozen=True)
class Statements:
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
    def build(cls, dialect: str) -> Statements:
        """Statements for a dialect; the clock is the database's where we know how to read it."""
        now = _clock(dialect)
        state, slots = limiter_state.c, limiter_slots.c
        provider = bindparam("b_provider", type_=String)
        tolerance = bindparam("b_tolerance", type_=Double)
        free = slots.holder.is_(None) | (slots.expires_at < now)
        candidate = _free_slot(now, provider)
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


def _clock(dialect: str) -> ColumnElement[float]:
    """Now, in epoch seconds: the database's clock where we know how to read it, else a
    bound value the client fills in."""
    if dialect == "sqlite":
        return literal_column("((julianday('now') - 2440587.5) * 86400.0)", Double)
    if dialect == "postgresql":
        return literal_column(
            "CAST(EXTRACT(EPOCH FROM statement_timestamp()) AS DOUBLE PRECISION)", Double
        )
    return bindparam("b_now", type_=Double)


def _free_slot(now: ColumnElement[float], provider: Any) -> Any:
    """The lowest free slot of the provider, as a subquery. SKIP LOCKED (PostgreSQL; SQLite
    has one writer anyway) lets concurrent takers pick different free rows instead of
    queueing on the lowest one."""
    spare = limiter_slots.alias("spare")
    return (
        select(spare.c.idx)
        .where(
            spare.c.provider == provider,
            spare.c.idx < bindparam("b_count", type_=Integer),
            spare.c.holder.is_(None) | (spare.c.expires_at < now),
        )
        .order_by(spare.c.idx)
        .limit(1)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )


class SlotStore:
    """Slots, rpm and cooldown as rows, changed by atomic UPDATEs (every method blocks)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._reads = read_engine(engine)
        self._statements = Statements.build(engine.dialect.name)
        self._ready: set[tuple[str, int]] = set()
        self._tables_ready = False
        self._schema_lock = threading.Lock()
        self._lock = threading.Lock()

    def release_holders(self, holders: list[str]) -> None:
        """Free the slots of these leases, one write for all."""
        with self.engine.begin() as conn:
            conn.execute(self._statements.release_all, {"b_holders": holders})

    def _params(self, **values: Any) -> dict[str, Any]:
        """Bound values, plus the client clock for databases whose clock we cannot read."""
        if self._statements.client_clock:
            values["b_now"] = time.time()
        return values

    def _take_token(self, conn: Connection, config: ProviderConfig, pace: Pace) -> bool:
        """Take an rpm token in the caller's transaction; False when none is due yet."""
        token = conn.execute(
            self._statements.take_token,
            self._params(
                b_provider=config.key, b_tolerance=pace.tolerance, b_interval=pace.interval
            ),
        )
        return token.rowcount != 0

    def may_reuse(self, config: ProviderConfig, pace: Pace) -> bool:
        """True when the provider is not cooling down, nobody waited for a slot lately, and
        (with an rpm) a token was taken: one transaction, or one read with no rpm."""
        held_back = self._statements.held_back
        params = self._params(b_provider=config.key, b_fair_window=FAIR_WINDOW_S)
        if not pace.interval:
            with self._reads.connect() as conn:
                return conn.execute(held_back, params).first() is None
        with self.engine.connect() as conn:
            if not self._take_token(conn, config, pace):
                return False
            if conn.execute(held_back, params).first() is not None:
                return False  # the rollback gives the token back
            conn.commit()
            return True

    def try_acquire(
        self, config: ProviderConfig, holder: str, fresh: bool = False, started: float = 0.0
    ) -> Attempt:
        """One transaction: an rpm token (if the provider has an rpm), then a free slot, both
        only when the provider is not cooling down."""
        self._ensure(config)
        pace = Pace.of(config)
        sql = self._statements
        with self.engine.connect() as conn:
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
            return Attempt(lease=Lease(config.key, holder, int(taken[0]), expires))

    def _wait_for(
        self, conn: Connection, config: ProviderConfig, pace: Pace, *, slot_taken: bool
    ) -> Attempt:
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
            return Attempt(wait=wait if wait > 0 else 0.001, cooling=max(0.0, float(cooling)))
        # Not cooling down, so every slot is taken: tell newcomers to queue.
        conn.execute(self._statements.contend, self._params(b_provider=config.key))
        conn.commit()
        return Attempt(contended=True)

    def release(self, lease: Lease) -> None:
        """Free our slot row."""
        with self.engine.begin() as conn:
            conn.execute(
                self._statements.release,
                {"b_provider": lease.provider, "b_idx": lease.idx, "b_holder": lease.holder},
            )

    def free_slots_of(self, owners: list[str]) -> int:
        """Free the slots whose holder belongs to one of these owners."""
        self.create_tables()
        slots = limiter_slots.c
        with self.engine.begin() as conn:
            return sum(
                conn.execute(
                    update(limiter_slots)
                    .where(slots.holder.startswith(f"{owner}/", autoescape=True))
                    .values(holder=None, expires_at=0.0)
                ).rowcount
                for owner in owners
            )

    def cool_down(self, provider: str, seconds: float) -> None:
        """Set cooldown_until to the later of its value and now + seconds."""
        self._ensure_state(provider)
        with self.engine.begin() as conn:
            conn.execute(
                self._statements.cool_down, self._params(b_provider=provider, b_seconds=seconds)
            )

    def cooldown_remaining(self, provider: str) -> float:
        """Seconds left of the cooldown, 0 when there is none."""
        self.create_tables()
        with self.engine.connect() as conn:
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
        self.create_tables()
        self._insert_missing(
            limiter_state, [{"provider": provider, "next_free": 0.0, "cooldown_until": 0.0}]
        )
        with self._lock:
            self._ready.add((provider, -1))

    def create_tables(self) -> None:
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
                    with self.engine.begin() as conn:
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
        dialect = self.engine.dialect.name
        with self.engine.begin() as conn:
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
