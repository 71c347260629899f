"""The context window a server says it has, asked when a provider's file sets none.

llama.cpp answers a prompt over its window with a 200 and an empty stream; knowing the
window is what tells that answer from a stream cut short. Each server says it in its own
place: llama.cpp in `/props`, vLLM in `/v1/models`, Ollama in `/api/show`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2

from swarmdeck.models.registry import ProviderConfig

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 5.0
# What each provider's server said (None: it says nothing we can read), per process.
_known: dict[tuple[str, str], int | None] = {}

Probe = Callable[[httpx2.AsyncClient, str, dict[str, str], str], Awaitable[int | None]]


def configured_window(config: ProviderConfig) -> int | None:
    """The window the provider's file sets, or None when it relies on the default."""
    return config.context_tokens if "context_tokens" in config.model_fields_set else None


async def server_window(
    config: ProviderConfig, model_name: str, http: httpx2.AsyncClient, key: str
) -> int | None:
    """The window the provider's server says it has (asked once per provider and process)."""
    cached = (config.key, config.base_url)
    if cached in _known:
        return _known[cached]
    headers = {"Authorization": f"Bearer {key}"}
    window = None
    for probe in (llama_cpp_window, vllm_window, ollama_window):
        try:
            window = await probe(http, config.base_url, headers, model_name)
        except (httpx2.HTTPError, ValueError, TypeError, AttributeError) as exc:
            log.debug("%s: %s did not say its window: %s", config.key, probe.__name__, exc)
            window = None
        if window:
            break
    _known[cached] = window
    return window


def _root(base_url: str) -> str:
    """The server's root: base_url without the OpenAI-style `/v1`."""
    return base_url.removesuffix("/v1")


async def _json(response: Awaitable[httpx2.Response]) -> Any:
    """The JSON of a successful answer; None otherwise."""
    answer = await response
    return answer.json() if answer.status_code == 200 else None


async def llama_cpp_window(
    http: httpx2.AsyncClient, base_url: str, headers: dict[str, str], model_name: str
) -> int | None:
    """llama.cpp: `/props`, `default_generation_settings.n_ctx` (a slot's window)."""
    body = await _json(
        http.get(f"{_root(base_url)}/props", headers=headers, timeout=PROBE_TIMEOUT_S)
    )
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings") or {}
    return _positive(settings.get("n_ctx", body.get("n_ctx")))


async def vllm_window(
    http: httpx2.AsyncClient, base_url: str, headers: dict[str, str], model_name: str
) -> int | None:
    """vLLM: `/v1/models`, the served model's `max_model_len`."""
    body = await _json(http.get(f"{base_url}/models", headers=headers, timeout=PROBE_TIMEOUT_S))
    models = body.get("data") if isinstance(body, dict) else None
    if not isinstance(models, list):
        return None
    chosen = [m for m in models if isinstance(m, dict) and m.get("id") == model_name]
    for model in chosen or [m for m in models if isinstance(m, dict)]:
        if window := _positive(model.get("max_model_len")):
            return window
    return None


async def ollama_window(
    http: httpx2.AsyncClient, base_url: str, headers: dict[str, str], model_name: str
) -> int | None:
    """Ollama: `/api/show`, the model's `num_ctx` parameter, else its trained length."""
    body = await _json(
        http.post(
            f"{_root(base_url)}/api/show",
            json={"model": model_name},
            headers=headers,
            timeout=PROBE_TIMEOUT_S,
        )
    )
    if not isinstance(body, dict):
        return None
    for line in str(body.get("parameters") or "").splitlines():
        name, _, value = line.partition(" ")
        if name == "num_ctx":
            return _positive(value.strip())
    info = body.get("model_info") or {}
    lengths = [v for k, v in info.items() if str(k).endswith(".context_length")]
    return _positive(lengths[0]) if lengths else None


def _positive(value: Any) -> int | None:
    """A window size, if `value` is one."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None
