"""The call path both adapters share: the key, the HTTP client, and the one retry loop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx2

from swarmdeck.errors import MissingKeyError, ProviderError
from swarmdeck.models import errors
from swarmdeck.models.estimate import estimate_usage, prompt_tokens
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.pricing import cost_usd, load_prices_aside
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.types import (
    ChunkCallback,
    Completion,
    DeltaCallback,
    Message,
    Notice,
    NoticeCallback,
    ToolSpec,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0

Sleep = Callable[[float], Awaitable[None]]
KeyLoader = Callable[[], str | None]
# Keyless endpoints (Ollama, vLLM) still get a bearer value: the SDKs refuse to send none.
NO_KEY = "no-key"
CONNECT_TIMEOUT_S = 10.0
# A cooldown another caller stretched by less than this is still the one this call set.
HELD_SLACK_S = 1.0


async def load_key(config: ProviderConfig, key_loader: KeyLoader) -> str:
    """Read the provider's key now (off the loop); never cache it anywhere."""
    key = await asyncio.to_thread(key_loader)
    if key:
        return key
    if config.needs_key:
        raise missing_key(config.key)
    return NO_KEY


def missing_key(provider: str) -> MissingKeyError:
    """The error for a provider that needs a key and has none stored."""
    return MissingKeyError(f"no key for provider {provider}", f"run `swarmdeck key set {provider}`")


def scrub(error: ProviderError, key: str) -> ProviderError:
    """The same error with any copy of the key masked (vendors echo keys in auth errors)."""
    if len(key) < 8 or key == NO_KEY or (key not in error.message and key not in error.hint):
        return error
    return ProviderError(
        error.message.replace(key, "***"),
        error.hint.replace(key, "***"),
        retryable=error.retryable,
        status=error.status,
        retry_after=error.retry_after,
        kind=error.kind,
    )


class CallbackError(Exception):
    """Wraps an exception raised by the caller's on_delta, so adapters pass it on untouched."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


async def tell(callback: Callable[..., Awaitable[None] | None] | None, *args: object) -> None:
    """Hand something to a caller's listener (sync or async). A listener only listens: its
    failure is logged and the call goes on."""
    if callback is None:
        return
    try:
        result = callback(*args)
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        log.warning("a listener of the provider call failed: %s: %s", type(exc).__name__, exc)


async def emit(on_delta: DeltaCallback | None, text: str) -> None:
    """Hand streamed text to the caller's callback (sync or async)."""
    if on_delta is None:
        return
    try:
        result = on_delta(text)
        if inspect.isawaitable(result):
            await result
    except Exception as exc:
        raise CallbackError(exc) from exc


@dataclass
class TurnCall:
    """What every attempt of one model turn shares: the conversation, and the caller's
    listeners for streamed text, for any streamed chunk, and for waits."""

    messages: list[Message]
    tools: list[ToolSpec]
    on_delta: DeltaCallback | None = None
    on_chunk: ChunkCallback | None = None
    on_notice: NoticeCallback | None = None
    _prompt_tokens: int | None = field(default=None, repr=False)

    async def delta(self, text: str) -> None:
        """Streamed text arrived (the caller's on_delta may raise: see CallbackError)."""
        await emit(self.on_delta, text)

    async def chunk(self) -> None:
        """Some part of the answer arrived."""
        await tell(self.on_chunk)

    def prompt_tokens(self) -> int:
        """The prompt's size, estimated (once)."""
        if self._prompt_tokens is None:
            self._prompt_tokens = prompt_tokens(self.messages, self.tools)
        return self._prompt_tokens

    def empty_answer(self, config: ProviderConfig, window: int | None = None) -> ProviderError:
        """The error for a 200 whose stream held nothing at all, for a model whose window
        is `window` (else the provider file's)."""
        return errors.empty_answer(
            config.key, self.prompt_tokens(), window or config.context_tokens
        )


def is_json_answer(response: httpx2.Response) -> bool:
    """True when a streamed request got a plain JSON body: a server that ignores `stream`."""
    content_type = response.headers.get("content-type", "")
    return content_type.split(";")[0].strip().lower() == "application/json"


def http_timeout(config: ProviderConfig) -> httpx2.Timeout:
    """Fail fast when the endpoint does not accept connections; let slow models take their time."""
    return httpx2.Timeout(config.timeout_s, connect=min(CONNECT_TIMEOUT_S, config.timeout_s))


# The SDKs' pool sizes, with idle connections kept 30 s instead of httpx's 5 s. aiohttp
# reuses its oldest idle connection first: with 1,000 sessions a pool holds hundreds, each
# waits its turn longer than 5 s, and nearly every request found its connection expired
# and opened a new one (1,962 connections for 2,000 requests, bench/concurrency.py).
# Servers keep idle connections longer (the fake LLM 60 s); one that hangs up sooner is
# seen as closed before reuse.
POOL_LIMITS = httpx2.Limits(
    max_connections=1000, max_keepalive_connections=100, keepalive_expiry=30.0
)


def pooled_client_factory(sdk: Any) -> Callable[[], httpx2.AsyncClient]:
    """The SDK's aiohttp-backed client when aiohttp is installed (`openai[aiohttp]`,
    `anthropic[aiohttp]`), else its httpx one, both with POOL_LIMITS. Measured with 1,000
    concurrent sessions: the httpx transport was nearly half of a session's CPU."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return functools.partial(sdk.DefaultAsyncHttpxClient, limits=POOL_LIMITS)
    return functools.partial(sdk.DefaultAioHttpClient, limits=POOL_LIMITS)


# How long closing a pool may wait for the loop that owns it.
POOL_CLOSE_TIMEOUT_S = 5.0


class SharedHttpClient:
    """One keyless HTTP connection pool per event loop, reused by every call of an adapter.

    Pools cannot cross loops, and a process may call from more than one (its own, and the
    engine's background loop that runs queued workflows): each pool is closed on the loop
    that opened it, or aiohttp reports it unclosed when the process ends."""

    def __init__(
        self, given: httpx2.AsyncClient | None, factory: Callable[[], httpx2.AsyncClient]
    ) -> None:
        self._given = given
        self._factory = factory
        self._pools: dict[asyncio.AbstractEventLoop, httpx2.AsyncClient] = {}

    def get(self) -> httpx2.AsyncClient:
        """The caller's client, or ours for the running loop."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None or pool.is_closed:
            # A loop that ended took its pool's sockets with it.
            self._pools = {k: v for k, v in self._pools.items() if not k.is_closed()}
            pool = self._pools[loop] = self._factory()
        return pool

    async def aclose(self) -> None:
        """Close our own pools, each on its loop; a client the caller gave us is the
        caller's to close."""
        here = asyncio.get_running_loop()
        pools, self._pools = self._pools, {}
        for loop, pool in pools.items():
            if pool.is_closed or loop.is_closed():
                continue
            if loop is here:
                await pool.aclose()
            elif loop.is_running():
                done = asyncio.run_coroutine_threadsafe(pool.aclose(), loop)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.wrap_future(done), POOL_CLOSE_TIMEOUT_S)


def backoff_delay(attempt: int) -> float:
    """Exponential backoff with equal jitter for the `attempt`-th failure (1-based)."""
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


async def complete_with_retry(
    config: ProviderConfig,
    model_name: str,
    limiter: ProviderLimiter,
    attempt: Callable[[], Awaitable[Completion]],
    turn: TurnCall,
) -> Completion:
    """One model turn through the retry loop; usage estimated when the provider reported
    none (so token budgets still count it), then priced."""
    load_prices_aside()
    completion = await call_with_retry(config, limiter, attempt, on_notice=turn.on_notice)
    if not completion.usage.reported:
        completion.usage = estimate_usage(turn.messages, turn.tools, completion)
    completion.cost_usd = cost_usd(config.key, model_name, completion.usage)
    return completion


async def call_with_retry(
    config: ProviderConfig,
    limiter: ProviderLimiter,
    call: Callable[[], Awaitable[T]],
    *,
    sleep: Sleep = asyncio.sleep,
    on_notice: NoticeCallback | None = None,
) -> T:
    """Run `call` under a limiter slot; retry retryable ProviderErrors up to config.max_attempts.

    Every wait is told to `on_notice` before it starts: a backoff, a cooldown this call
    sets, and a cooldown someone else set that holds this call back.
    """

    # The cooldown this call set itself was told already; being held back by it is not news.
    own_cooldown_ends = 0.0

    async def held(seconds: float) -> None:
        if time.monotonic() + seconds <= own_cooldown_ends + HELD_SLACK_S:
            return
        reason = f"{config.key} is cooling down after a rate limit"
        await tell(on_notice, Notice("held", reason, seconds))

    for attempt in range(1, config.max_attempts + 1):
        try:
            async with limiter.slot(config, held if on_notice is not None else None):
                return await call()
        except ProviderError as exc:
            error = exc
        if not error.retryable:
            raise error
        if attempt == config.max_attempts:
            raise ProviderError(
                f"{error.message} (gave up after {attempt} attempts)",
                error.hint,
                retryable=True,
                status=error.status,
                retry_after=error.retry_after,
                kind=error.kind,
            )
        cooling = await _pause(config, limiter, error, attempt, sleep, on_notice)
        own_cooldown_ends = time.monotonic() + cooling
    raise AssertionError("unreachable: max_attempts >= 1")


async def _pause(
    config: ProviderConfig,
    limiter: ProviderLimiter,
    error: ProviderError,
    attempt: int,
    sleep: Sleep,
    on_notice: NoticeCallback | None,
) -> float:
    """Wait before the next attempt: a shared cooldown on rate limits (whose length it
    returns; the next slot waits it out), a private backoff otherwise (0)."""
    if error.retry_after is not None:
        # Shared, so every caller of this provider waits, not only the one that was told to.
        seconds = min(error.retry_after, config.retry_after_cap_s)
        notice = Notice("cooldown", error.message, seconds, attempt, config.max_attempts)
        log.info("%s: %s", config.key, notice.one_line())
        await tell(on_notice, notice)
        await _shared_cooldown(config, limiter, seconds, sleep)
        return seconds
    delay = backoff_delay(attempt)
    if error.status == 429:
        # A 429 without Retry-After still means the provider is saturated for everyone.
        await tell(
            on_notice, Notice("cooldown", error.message, delay, attempt, config.max_attempts)
        )
        await _shared_cooldown(config, limiter, delay, sleep)
        return delay
    notice = Notice("retry", error.message, delay, attempt, config.max_attempts)
    log.info("%s: %s", config.key, notice.one_line())
    await tell(on_notice, notice)
    await sleep(delay)
    return 0.0


async def _shared_cooldown(
    config: ProviderConfig, limiter: ProviderLimiter, seconds: float, sleep: Sleep
) -> None:
    """Set the provider's shared cooldown; if the store cannot take it, at least wait here."""
    try:
        await limiter.cool_down(config.key, seconds)
    except Exception as exc:
        log.warning("%s: could not record a cooldown (%s); waiting locally", config.key, exc)
        await sleep(seconds)
