"""The provider limiter on a real SQLite file: shared slots, rpm and cooldown across instances and processes."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, update
from sqlalchemy.exc import OperationalError

from swarmdeck.models.limiter import PARK_S, ProviderLimiter
from swarmdeck.models.limiter_store import Pace, SlotStore, limiter_slots
from tests.conftest import Store
from tests.integration.limiter_support import Interval, hold, make_engine, max_overlap, provider
from tests.machine_load import stretched_by_load

# --- concurrency ----------------------------------------------------------------------------


async def test_concurrency_cap_is_shared_between_two_limiters(
    shared_limiters: tuple[ProviderLimiter, ProviderLimiter],
) -> None:
    config = provider(concurrency=3)
    held: list[Interval] = []
    # Held 0.3 s each: long beside a slot's round trips, so that three overlap however slow.
    await asyncio.gather(*(hold(shared_limiters[i % 2], config, 0.3, held) for i in range(16)))
    assert len(held) == 16
    assert max_overlap(held) == 3


# The other worker: a plain process on the same store (kept light: no SDK imports). It takes
# one slot when told, says when it has it, and gives it back when told.
CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from swarmdeck.catalog.db import create_db_engine
    from swarmdeck.models.limiter import ProviderLimiter
    from swarmdeck.models.registry import ProviderConfig

    engine = create_db_engine(sys.argv[1])

    async def main():
        limiter = ProviderLimiter(engine)
        config = ProviderConfig(
            key="p", kind="openai", base_url="http://127.0.0.1:9/v1", model="m", concurrency=2
        )
        await limiter.cooldown_remaining("p")
        print("ready", flush=True)
        sys.stdin.readline()
        slot = limiter.slot(config)
        print("trying", flush=True)
        await slot.__aenter__()
        print("took", flush=True)
        sys.stdin.readline()
        await slot.__aexit__(None, None, None)
        limiter.close()

    asyncio.run(main())
    """
)


async def test_concurrency_cap_is_shared_across_processes(
    sqlite_store: Store, tmp_path: Path
) -> None:
    # Judged by who waits for whom, not by timings: a loaded machine only makes each side
    # slower, which cannot make this pass or fail.
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        sqlite_store.url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None

    async def line() -> bytes:
        return (await asyncio.wait_for(child.stdout.readline(), 30)).strip()  # type: ignore[union-attr]

    async def say(text: bytes) -> None:
        child.stdin.write(text + b"\n")  # type: ignore[union-attr]
        await child.stdin.drain()  # type: ignore[union-attr]

    assert await line() == b"ready"
    limiter = ProviderLimiter(make_engine(sqlite_store.url))
    config = provider(concurrency=2)
    mine = [limiter.slot(config), limiter.slot(config)]
    for slot in mine:
        await slot.__aenter__()
    await say(b"go")
    assert await line() == b"trying"
    # Both slots are ours: the other process must wait for one.
    took = asyncio.create_task(line())
    await asyncio.sleep(1.0)
    assert not took.done(), "the other process took a slot past the shared cap of 2"
    await mine.pop().__aexit__(None, None, None)
    assert await took == b"took"
    # Now it holds one and we hold one: our next slot waits until it gives its back.
    third = limiter.slot(config)
    taking = asyncio.create_task(third.__aenter__())
    await asyncio.sleep(0.5)
    assert not taking.done(), "this process took a slot past the shared cap of 2"
    await say(b"release")
    await asyncio.wait_for(taking, 30)
    assert await child.wait() == 0
    for slot in (*mine, third):
        await slot.__aexit__(None, None, None)
    limiter.close()


async def test_crashed_holders_lease_expires(
    shared_limiters: tuple[ProviderLimiter, ProviderLimiter], store: Store
) -> None:
    crashed, alive = shared_limiters
    config = provider(concurrency=1)
    # A holder that never gives its slot back, like a worker killed mid-call.
    leaked = crashed.slot(config)
    await leaked.__aenter__()
    waiting = asyncio.create_task(hold(alive, config, 0, []))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    # Its lease runs out (fast-forwarded here instead of waiting timeout_s + margin).
    engine = make_engine(store.url)
    with engine.begin() as conn:
        conn.execute(update(limiter_slots).values(expires_at=0.0))
    engine.dispose()
    await asyncio.wait_for(waiting, stretched_by_load(2))
    del leaked


# --- slots kept between a process's calls ---------------------------------------------------


async def until_freed(url: str, slots: int) -> None:
    """Wait until every slot row is free (a kept slot goes back PARK_S after its call, on a
    DB thread: later on a loaded machine)."""
    deadline = time.monotonic() + 20
    while slot_holders(url) != [None] * slots:
        assert time.monotonic() < deadline, slot_holders(url)
        await asyncio.sleep(0.05)


def taken_slots(url: str) -> list[str]:
    """The holders of the slots taken (none before the limiter made its tables)."""
    try:
        return [h for h in slot_holders(url) if h is not None]
    except OperationalError:
        return []


def slot_holders(url: str) -> list[str | None]:
    """Who holds each slot row, in slot order."""
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(limiter_slots.c.holder).order_by(limiter_slots.c.idx)).scalars()
        holders = list(rows)
    engine.dispose()
    return holders


async def test_a_process_reuses_its_slot_then_gives_it_back(
    shared_limiters: tuple[ProviderLimiter, ProviderLimiter], store: Store
) -> None:
    limiter, _ = shared_limiters
    config = provider(concurrency=2)
    await hold(limiter, config, 0, [])
    (first,) = [h for h in slot_holders(store.url) if h]
    # The next call right after takes the same kept slot: no second row is taken.
    await hold(limiter, config, 0, [])
    assert [h for h in slot_holders(store.url) if h] == [first]
    # Unused for a moment (PARK_S), it goes back to the store, long before its lease ends.
    await until_freed(store.url, 2)


def test_a_kept_slot_is_checked_by_one_read_outside_a_transaction(store: Store) -> None:
    # Without an rpm there is no token to take: whether a kept slot may be used again is one
    # read, with no BEGIN or COMMIT around it (two more round trips on PostgreSQL).
    engine = make_engine(store.url)
    slots = SlotStore(engine)
    config = provider(concurrency=2)
    assert slots.try_acquire(config, "h1").lease is not None
    seen: list[tuple[str, str | None]] = []

    def executed(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        level = conn.get_execution_options().get("isolation_level")
        seen.append((statement.split()[0], level))

    event.listen(engine, "before_cursor_execute", executed)
    event.listen(engine, "commit", lambda _conn: seen.append(("COMMIT", None)))
    assert slots.may_reuse(config, Pace.of(config))
    # SQLite's driver opens no transaction for a read.
    assert seen == [("SELECT", "AUTOCOMMIT" if store.name == "postgres" else None)]
    slots.cool_down("p", 5)
    assert not slots.may_reuse(config, Pace.of(config))
    # With an rpm, the token taken and the check are one transaction.
    paced = provider(key="q", concurrency=2, rpm=600)
    assert slots.try_acquire(paced, "h2").lease is not None
    seen.clear()
    assert slots.may_reuse(paced, Pace.of(paced))
    assert seen == [("UPDATE", None), ("SELECT", None), ("COMMIT", None)]
    engine.dispose()


async def test_kept_slots_that_expire_together_go_back_in_one_write(
    shared_limiters: tuple[ProviderLimiter, ProviderLimiter], store: Store
) -> None:
    limiter, _ = shared_limiters
    config = provider(concurrency=20)
    await hold(limiter, config, 0, [])  # the tables and slot rows exist
    await until_freed(store.url, 20)
    writes: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE LIMITER_SLOTS"):
            writes.append(statement)

    engine = limiter._backend._engine  # type: ignore[union-attr]
    event.listen(engine, "before_cursor_execute", count)
    all_in, done = asyncio.Event(), asyncio.Event()
    holding = 0

    async def call() -> None:
        nonlocal holding
        async with limiter.slot(config):
            holding += 1
            if holding == 20:
                all_in.set()
            await done.wait()

    try:
        # Twenty sessions' calls end together: each keeps its slot for its next turn.
        calls = [asyncio.create_task(call()) for _ in range(20)]
        await asyncio.wait_for(all_in.wait(), 30)
        taken = len(writes)
        done.set()
        await asyncio.gather(*calls)
        assert len([h for h in slot_holders(store.url) if h]) == 20
        await until_freed(store.url, 20)
        await asyncio.sleep(PARK_S)  # a second write, if any, would come by now
    finally:
        event.remove(engine, "before_cursor_execute", count)
    # All twenty went back in one UPDATE (two if an expiry tick fell between them; a write
    # each before).
    assert slot_holders(store.url) == [None] * 20
    assert len(writes) - taken <= 2, writes[taken:]


async def test_a_kept_slot_goes_to_another_process_that_waits(
    shared_limiters: tuple[ProviderLimiter, ProviderLimiter],
) -> None:
    busy, waiting = shared_limiters
    config = provider(concurrency=1)
    stop = asyncio.Event()

    calls = 0

    async def keep_calling() -> None:
        nonlocal calls
        while not stop.is_set():
            await hold(busy, config, 0.002, [])
            calls += 1

    looping = asyncio.create_task(keep_calling())
    while calls < 5:  # the busy process is in its loop, reusing its kept slot
        await asyncio.sleep(0.01)
    before = calls
    started = time.monotonic()
    # Without the fairness check the busy process would keep its slot for ever.
    await asyncio.wait_for(hold(waiting, config, 0, []), 30)
    waited = time.monotonic() - started
    stop.set()
    await looping
    assert calls > before  # it got in while the busy one kept calling, not after it stopped
    assert waited < min(stretched_by_load(1.0), 10.0), waited


async def test_a_cooldown_from_elsewhere_stops_reuse_of_a_kept_slot(
    shared_limiters: tuple[ProviderLimiter, ProviderLimiter],
) -> None:
    first, second = shared_limiters
    config = provider(concurrency=2)
    await hold(first, config, 0, [])  # first now keeps a slot
    await second.cool_down("p", 0.5)
    started = time.monotonic()
    await hold(first, config, 0, [])
    assert time.monotonic() - started >= 0.4


async def test_slots_of_a_dead_worker_are_freed(
    shared_limiters: tuple[ProviderLimiter, ProviderLimiter], store: Store
) -> None:
    dead, alive = shared_limiters
    dead.set_owner("host-1-dead")
    alive.set_owner("host-2-alive")
    config = provider(concurrency=2)
    leaked = dead.slot(config)
    await leaked.__aenter__()  # killed mid-call: never gives it back
    await hold(alive, config, 0, [])  # and the live one keeps its own slot
    assert len([h for h in slot_holders(store.url) if h]) == 2
    assert alive.free_slots_of(["host-1-dead"]) == 1
    holders = [h for h in slot_holders(store.url) if h]
    assert len(holders) == 1 and holders[0].startswith("host-2-alive/")
    del leaked


# --- rpm and cooldown -----------------------------------------------------------------------


async def test_rpm_spaces_requests_across_limiters(
    limiters: tuple[ProviderLimiter, ProviderLimiter],
) -> None:
    config = provider(concurrency=1, rpm=1200)  # one request per 0.05 s, no burst
    held: list[Interval] = []
    await asyncio.gather(*(hold(limiters[i % 2], config, 0, held) for i in range(6)))
    starts = sorted(s for s, _ in held)
    assert starts[-1] - starts[0] >= 5 * 0.05 * 0.9


async def test_rpm_allows_a_burst_up_to_concurrency(
    limiters: tuple[ProviderLimiter, ProviderLimiter],
) -> None:
    # One per 10 s after a burst of four (a shorter spacing let a slow burst's fifth in).
    config = provider(concurrency=4, rpm=6)
    held: list[Interval] = []
    started = time.monotonic()
    await asyncio.gather(*(hold(limiters[i % 2], config, 0, held) for i in range(4)))
    # Spaced at one per 10 s, the four would take 30 s.
    assert time.monotonic() - started < min(stretched_by_load(0.5), 5.0)
    late = asyncio.create_task(hold(limiters[0], config, 0, held))
    await asyncio.sleep(0.3)
    assert not late.done()
    late.cancel()


async def test_cooldown_holds_back_every_limiter(
    shared_limiters: tuple[ProviderLimiter, ProviderLimiter],
) -> None:
    first, second = shared_limiters
    config = provider(concurrency=8)
    # Timed from before the cooldown starts: the database round trips after it would
    # otherwise eat into the window under load.
    started = time.monotonic()
    await first.cool_down("p", 0.4)
    remaining = await second.cooldown_remaining("p")
    # What is left is the 0.4 s less what has passed since, however long the round trips
    # took on a loaded machine (a fixed 0.2 s floor once failed there). SQLite's clock is a
    # julian day in floating point: the same instant read twice can differ in the seventh
    # decimal of a second.
    assert 0.4 - (time.monotonic() - started) - 1e-3 < remaining <= 0.4 + 1e-6
    # A shorter cooldown never cuts a longer one short.
    await second.cool_down("p", 0.1)
    await asyncio.gather(*(hold(second, config, 0, []) for _ in range(5)))
    assert time.monotonic() - started >= 0.35
    assert await first.cooldown_remaining("p") == 0.0


async def test_in_process_limiter_without_a_database() -> None:
    limiter = ProviderLimiter()
    config = provider(concurrency=2, rpm=6000)
    held: list[Interval] = []
    await asyncio.gather(*(hold(limiter, config, 0.03, held) for _ in range(8)))
    assert max_overlap(held) == 2
    await limiter.cool_down("p", 0.2)
    started = time.monotonic()
    await hold(limiter, config, 0, held)
    assert time.monotonic() - started >= 0.18


async def test_cancelled_caller_gives_its_slot_back(
    limiters: tuple[ProviderLimiter, ProviderLimiter], sqlite_store: Store
) -> None:
    config = provider(concurrency=1)
    stuck = asyncio.create_task(hold(limiters[0], config, 10, []))
    # Cancelled once it holds the slot (it would hold it 10 s).
    deadline = time.monotonic() + 30
    while not any(taken_slots(sqlite_store.url)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    stuck.cancel()
    await asyncio.wait_for(hold(limiters[1], config, 0, []), 5)


async def test_a_caller_cancelled_while_its_try_takes_the_slot_gives_it_back(
    limiters: tuple[ProviderLimiter, ProviderLimiter], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The try's write commits on a DB thread after the caller is cancelled: the slot it
    # took must go back at once, not when its lease lapses (the provider's timeout on).
    config = provider(concurrency=1, timeout_s=600)
    store = type(limiters[0]._backend._store)  # type: ignore[union-attr]
    taking = store.try_acquire

    def slow_try(self: Any, *args: Any) -> Any:
        time.sleep(0.5)
        return taking(self, *args)

    monkeypatch.setattr(store, "try_acquire", slow_try)
    stuck = asyncio.create_task(hold(limiters[0], config, 10, []))
    await asyncio.sleep(0.1)
    stuck.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck
    await asyncio.wait_for(hold(limiters[1], config, 0, []), 10)
