"""The call path both adapters share: the key, the HTTP client, and the one retry loop."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2

from swarmdeck.errors import MissingKeyError, ProviderError
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.types import DeltaCallback

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0

Sleep = Callable[[float], Awaitable[None]]
KeyLoader = Callable[[], str | None]
# Keyless endpoints (Ollama, vLLM) still get a bearer value: the SDKs refuse to send none.
NO_KEY = "no-key"
CONNECT_TIMEOUT_S = 10.0


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
    )


class CallbackError(Exception):
    """Wraps an exception raised by the caller's on_delta, so adapters pass it on untouched."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


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


def http_timeout(config: ProviderConfig) -> httpx2.Timeout:
    """Fail fast when the endpoint does not accept connections; let slow models take their time."""
    return httpx2.Timeout(config.timeout_s, connect=min(CONNECT_TIMEOUT_S, config.timeout_s))


def pooled_client_factory(sdk: Any) -> Callable[[], httpx2.AsyncClient]:
    """The SDK's aiohttp-backed client when aiohttp is installed (`openai[aiohttp]`,
    `anthropic[aiohttp]`), else its httpx one. Measured with 1,000 concurrent sessions:
    the httpx transport was nearly half of a session's CPU."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        return sdk.DefaultAsyncHttpxClient
    return sdk.DefaultAioHttpClient


class SharedHttpClient:
    """One keyless HTTP connection pool per event loop, reused by every call of an adapter."""

    def __init__(
        self, given: httpx2.AsyncClient | None, factory: Callable[[], httpx2.AsyncClient]
    ) -> None:
        self._given = given
        self._factory = factory
        self._own: httpx2.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def get(self) -> httpx2.AsyncClient:
        """The caller's client, or ours for the running loop (pools cannot cross loops)."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        if self._own is None or self._loop is not loop or self._own.is_closed:
            self._own, self._loop = self._factory(), loop
        return self._own

    async def aclose(self) -> None:
        """Close our own pool; a client the caller gave us is the caller's to close."""
        if self._own is not None and not self._own.is_closed:
            await self._own.aclose()
        self._own = None


def backoff_delay(attempt: int) -> float:
    """Exponential backoff with equal jitter for the `attempt`-th failure (1-based)."""
    ceiling = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
    return ceiling / 2 + random.uniform(0, ceiling / 2)


async def call_with_retry(
    config: ProviderConfig,
    limiter: ProviderLimiter,
    call: Callable[[], Awaitable[T]],
    *,
    sleep: Sleep = asyncio.sleep,
) -> T:
    """Run `call` under a limiter slot; retry retryable ProviderErrors up to config.max_attempts."""
    for attempt in range(1, config.max_attempts + 1):
        try:
            async with limiter.slot(config):
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
            )
        await _pause(config, limiter, error, attempt, sleep)
    raise AssertionError("unreachable: max_attempts >= 1")


async def _pause(
    config: ProviderConfig,
    limiter: ProviderLimiter,
    error: ProviderError,
    attempt: int,
    sleep: Sleep,
) -> None:
    """Wait before the next attempt: a shared cooldown on rate limits, a private backoff otherwise."""
    if error.retry_after is not None:
        # Shared, so every caller of this provider waits, not only the one that was told to.
        seconds = min(error.retry_after, config.retry_after_cap_s)
        log.info("%s: cooling down %.1fs (%s)", config.key, seconds, error.message)
        await _shared_cooldown(config, limiter, seconds, sleep)
        return
    delay = backoff_delay(attempt)
    if error.status == 429:
        # A 429 without Retry-After still means the provider is saturated for everyone.
        await _shared_cooldown(config, limiter, delay, sleep)
        return
    log.info("%s: retrying in %.1fs (%s)", config.key, delay, error.message)
    await sleep(delay)


async def _shared_cooldown(
    config: ProviderConfig, limiter: ProviderLimiter, seconds: float, sleep: Sleep
) -> None:
    """Set the provider's shared cooldown; if the store cannot take it, at least wait here."""
    try:
        await limiter.cool_down(config.key, seconds)
    except Exception as exc:
        log.warning("%s: could not record a cooldown (%s); waiting locally", config.key, exc)
        await sleep(seconds)
