"""A family's first request on its shared prefix goes alone; its siblings' first requests
wait for its answer to begin (runtime/prefix_warmup.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from swarmdeck.runtime import prefix_warmup
from swarmdeck.runtime.prefix_warmup import first_on_prefix


@contextlib.asynccontextmanager
async def a_stalled_first() -> AsyncIterator[None]:
    """The family's first request, its answer not begun until the block ends."""
    holding, release = asyncio.Event(), asyncio.Event()

    async def stuck() -> None:
        async with first_on_prefix("family"):
            holding.set()
            await release.wait()

    task = asyncio.create_task(stuck())
    await holding.wait()
    try:
        yield
    finally:
        release.set()
        await task


@pytest.fixture(autouse=True)
def _no_prefixes_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefix_warmup, "_prefixes", {})


async def test_siblings_wait_for_the_first_answer_to_begin() -> None:
    order: list[str] = []
    first_in = asyncio.Event()
    answer_begins = asyncio.Event()

    async def first() -> None:
        async with first_on_prefix("family") as began:
            order.append("first sends")
            first_in.set()
            await answer_begins.wait()
            began()
            order.append("first's answer began")
            await asyncio.sleep(0.05)  # the rest of its answer streams meanwhile

    async def sibling(name: str) -> None:
        await first_in.wait()
        async with first_on_prefix("family"):
            order.append(f"{name} sends")

    async def other_family() -> None:
        await first_in.wait()
        async with first_on_prefix("another"):
            order.append("another family sends")

    tasks = [asyncio.create_task(c) for c in (first(), sibling("a"), sibling("b"), other_family())]
    await asyncio.sleep(0.1)
    assert order == ["first sends", "another family sends"]  # the siblings wait
    answer_begins.set()
    await asyncio.gather(*tasks)
    assert order[2] == "first's answer began"
    assert sorted(order[3:]) == ["a sends", "b sends"]
    # Cached now: a later first request on it does not wait, nor go first again.
    async with asyncio.timeout(1):
        async with first_on_prefix("family"):
            pass


async def test_a_first_request_that_fails_lets_its_siblings_go() -> None:
    started = asyncio.Event()

    async def failing() -> None:
        async with first_on_prefix("family"):
            started.set()
            await asyncio.sleep(0.05)
            raise RuntimeError("the provider refused")

    async def sibling() -> str:
        await started.wait()
        async with first_on_prefix("family"):
            return "sent"

    failed, sent = await asyncio.gather(failing(), sibling(), return_exceptions=True)
    assert isinstance(failed, RuntimeError) and sent == "sent"


async def test_a_sibling_waits_no_longer_than_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prefix_warmup, "WAIT_S", 0.1)
    async with a_stalled_first(), asyncio.timeout(2), first_on_prefix("family"):
        pass  # went after 0.1 s, the first still unanswered


async def test_the_bound_counts_from_the_first_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first request that stalls holds the others back once: a sibling that comes later
    (a member retried after its timeout) waits only what is left of the bound."""
    monkeypatch.setattr(prefix_warmup, "WAIT_S", 0.5)
    async with a_stalled_first():
        with pytest.raises(TimeoutError):  # the first attempt gives up while it waits
            async with asyncio.timeout(0.3):
                async with first_on_prefix("family"):
                    pass
        loop = asyncio.get_running_loop()
        retried = loop.time()
        async with first_on_prefix("family"):
            waited = loop.time() - retried
        assert waited < 0.4, waited  # what was left of the 0.5 s, not 0.5 s again
