"""The limiter tests' helpers and fixtures: two workers' limiters on one store, a provider,
a slot held for a while."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from swarmdeck.catalog.db import create_db_engine
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.registry import ProviderConfig
from tests.conftest import Store

Interval = tuple[float, float]


def make_engine(url: str) -> Engine:
    """The engine the runtime gives the limiter: the catalog's (WAL, IMMEDIATE writers, psycopg)."""
    return create_db_engine(url)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Store:
    """A fresh SQLite store file (the embedded default)."""
    return Store("sqlite", f"sqlite:///{tmp_path / 'store.sqlite'}")


def limiter_pair(url: str) -> Iterator[tuple[ProviderLimiter, ProviderLimiter]]:
    """Two limiters on two engines over the same store, as two workers would have."""
    engines = (make_engine(url), make_engine(url))
    pair = (ProviderLimiter(engines[0]), ProviderLimiter(engines[1]))
    yield pair
    for limiter, engine in zip(pair, engines, strict=True):
        limiter.close()
        engine.dispose()


@pytest.fixture
def limiters(sqlite_store: Store) -> Iterator[tuple[ProviderLimiter, ProviderLimiter]]:
    """Two workers' limiters on one SQLite file."""
    yield from limiter_pair(sqlite_store.url)


@pytest.fixture
def shared_limiters(store: Store) -> Iterator[tuple[ProviderLimiter, ProviderLimiter]]:
    """Two workers' limiters on SQLite, then on PostgreSQL (the scale-out store)."""
    yield from limiter_pair(store.url)


def provider(**fields: object) -> ProviderConfig:
    """A provider config for limiter tests."""
    base: dict[str, object] = {
        "key": "p",
        "kind": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "model": "m",
    }
    return ProviderConfig.model_validate(base | fields)


def max_overlap(intervals: list[Interval]) -> int:
    """The most intervals open at one instant."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    peak = current = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


async def hold(
    limiter: ProviderLimiter, config: ProviderConfig, seconds: float, out: list[Interval]
) -> None:
    """Take a slot, keep it for `seconds`, record when it was held."""
    async with limiter.slot(config):
        start = time.time()
        await asyncio.sleep(seconds)
        out.append((start, time.time()))
