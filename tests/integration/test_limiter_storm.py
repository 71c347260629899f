"""The provider limiter against a 429 storm from the fake server: bounded retries, a shared
cooldown; and its tables made once by many first callers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import event

from swarmdeck.models.factory import build_chat_model
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.types import Message
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Fault, Reply
from tests.conftest import Store
from tests.integration.limiter_support import Interval, hold, make_engine, provider

# --- a 429 storm against the fake server ----------------------------------------------------


@contextlib.asynccontextmanager
async def storm_callers(
    fake: FakeLLM, limiters: tuple[ProviderLimiter, ProviderLimiter], n: int
) -> AsyncIterator[list]:
    """n callers on two warmed-up workers (one adapter each), each with its own conversation;
    the adapters' connection pools close at the end."""
    config = ProviderConfig(
        key="kimi", kind="openai", base_url=fake.openai_base_url, model="m", concurrency=n
    )
    models = [
        build_chat_model(config, "m", lambda: "sk-test-storm-0000000000", lim) for lim in limiters
    ]
    # First use of the SDK builds its validators on the loop; a cold start would bunch the callers.
    for model in models:
        await model.complete([Message("user", "warmup")], [])
    fake.reset_stats()
    try:
        yield [models[i % 2].complete([Message("user", f"task {i}")], []) for i in range(n)]
    finally:
        for model in models:
            await model.aclose()


async def test_retry_after_storm_sends_a_bounded_number_of_requests(
    limiters: tuple[ProviderLimiter, ProviderLimiter],
) -> None:
    fault = {"status": 429, "retry_after": 0.5, "times": 1}
    scenarios = [
        {"match": "warmup", "turns": [{"text": "ready"}]},
        {"turns": [{"text": "ok", "fault": fault}]},
    ]
    with FakeLLM({"scenarios": scenarios}) as fake:
        async with storm_callers(fake, limiters, 50) as callers:
            results = await asyncio.gather(*callers)
        assert all(r.text == "ok" for r in results)
        assert len(fake.requests) <= 50 * 2 + 5


async def test_shared_cooldown_keeps_late_callers_from_sending_into_a_storm(
    shared_limiters: tuple[ProviderLimiter, ProviderLimiter],
) -> None:
    """The provider refuses everything for 1.5 s after the first request. A few callers on
    one worker meet the storm; once the 429 has come back, the other callers, on both
    workers, send nothing into it: the second worker learns of it only through the store.
    (They start only then: started at a fixed time, a loaded machine once had them all
    sent before the first 429 came back.)"""
    storm: dict[str, float] = {}
    early_count = 5

    def script(request: FakeRequest) -> Reply:
        if request.task == "warmup":
            return Reply(text="ready")
        began = storm.setdefault("at", time.monotonic())
        if time.monotonic() - began < 1.5:
            return Reply(fault=Fault(status=429, retry_after=1.5))
        return Reply(text="ok")

    with FakeLLM(script) as fake:

        async def later(i: int, call) -> object:  # type: ignore[no-untyped-def]
            await asyncio.sleep(i * 0.005)
            return await call

        async with storm_callers(fake, shared_limiters, 50) as callers:
            first_worker = callers[0::2]  # storm_callers alternates the two workers
            early = [asyncio.ensure_future(c) for c in first_worker[:early_count]]
            deadline = time.monotonic() + 30
            while await shared_limiters[0].cooldown_remaining("kimi") <= 0:
                assert time.monotonic() < deadline, "no cooldown after the first 429"
                await asyncio.sleep(0.01)
            rest = [*first_worker[early_count:], *callers[1::2]]
            results = await asyncio.gather(*early, *(later(i, c) for i, c in enumerate(rest)))
        assert all(r.text == "ok" for r in results)  # type: ignore[attr-defined]
        # The early callers send at most twice each (the 429, then after the cooldown); every
        # other caller once. Without a shared cooldown the second worker's 25 would each meet
        # a 429 too.
        sent = len(fake.requests)
        assert sent <= 2 * early_count + len(rest), sent


async def test_first_use_from_many_sessions_at_once_creates_the_tables_without_error(
    sqlite_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A fresh store: the limiter's DB threads all find its tables missing at once. Losing
    that race is not a store error (the bench's sessions logged one, and retried, each run)."""
    caplog.set_level(logging.WARNING, logger="swarmdeck")
    engine = make_engine(sqlite_store.url)

    @event.listens_for(engine, "before_cursor_execute")
    def slow_ddl(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # A busy store: creating a table takes a moment, so every thread meets the race.
        if "CREATE TABLE" in statement:
            time.sleep(0.05)

    limiter = ProviderLimiter(engine)
    try:
        held: list[Interval] = []
        await asyncio.gather(*(hold(limiter, provider(concurrency=8), 0.0, held) for _ in range(8)))
        assert len(held) == 8
    finally:
        limiter.close()
        engine.dispose()
    assert [r.getMessage() for r in caplog.records if "store error" in r.getMessage()] == []
