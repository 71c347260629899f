"""A fast pre-flight check that a provider's endpoint answers at all."""

from __future__ import annotations

import asyncio
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
