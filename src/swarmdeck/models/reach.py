"""Fast checks that a provider's endpoint answers at all: a pre-flight before a run, and
a probe for `status`."""

from __future__ import annotations

import asyncio
import os
from urllib.parse import urlparse

from swarmdeck.errors import ProviderError


async def check_reachable(base_url: str, provider: str, timeout_s: float = 3.0) -> None:
    """Open and close a TCP connection to the endpoint; ProviderError when nothing answers."""
    url = urlparse(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    host = url.hostname or "localhost"
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, TimeoutError) as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ProviderError(
            f"cannot reach {provider} at {base_url}: {reason}",
            f"is the server running? check the endpoint with `swarmdeck provider show {provider}`",
            retryable=False,
        ) from exc
    writer.close()
    await writer.wait_closed()


PROBE_TIMEOUT_S = 2.0


async def probe(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when an HTTP server answers at the endpoint (any status: it answers), else why
    not, in a few words. Asks for the model list, which OpenAI-compatible servers serve
    without a key."""
    import httpx2

    try:
        async with httpx2.AsyncClient(timeout=timeout_s) as client:
            await client.get(f"{base_url.rstrip('/')}/models")
    except httpx2.TimeoutException:
        return f"no answer within {timeout_s:g}s"
    except httpx2.HTTPError as exc:
        return _reason(exc)
    return None


def _reason(exc: BaseException) -> str:
    """The innermost cause's message (\"Connection refused\", ...)."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    number = getattr(exc, "errno", None)
    if isinstance(number, int):
        return os.strerror(number).lower()
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())[:120]
