"""Build the adapter a provider's kind calls for."""

from __future__ import annotations

import httpx2

from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.pricing import load_prices
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.retry import KeyLoader, missing_key
from swarmdeck.models.types import ChatModel


def preload_adapters(configs: list[ProviderConfig]) -> None:
    """Import the adapters (and their SDKs) these providers need, and the price tables,
    ahead of their first call: a long-lived process (a worker) does it in a thread as it
    starts, so its first session's turn does not import them on the event loop every
    session shares."""
    kinds = {c.kind for c in configs}
    load_prices()
    if "anthropic" in kinds:
        import swarmdeck.models.anthropic
    if "openai-responses" in kinds:
        import swarmdeck.models.openai_responses
    if kinds - {"anthropic", "openai-responses"}:
        import swarmdeck.models.openai_compat  # noqa: F401


def build_chat_model(
    config: ProviderConfig,
    model_name: str,
    key_loader: KeyLoader,
    limiter: ProviderLimiter,
    http_client: httpx2.AsyncClient | None = None,
) -> ChatModel:
    """The ChatModel for `config`; MissingKeyError up front when a needed key is not stored."""
    # Checked here so a missing key fails before any session starts; the value is not kept.
    if config.needs_key and not key_loader():
        raise missing_key(config.key)
    if config.script is not None:
        from swarmdeck.models.scripted import serve_script

        config = config.model_copy(update={"base_url": serve_script(config.script)})
    # Imported here: each SDK costs 0.5-1.5 s to import, and a run needs only its own.
    if config.kind == "anthropic":
        from swarmdeck.models.anthropic import AnthropicModel

        return AnthropicModel(config, model_name, key_loader, limiter, http_client)
    if config.kind == "openai-responses":
        from swarmdeck.models.openai_responses import OpenAIResponsesModel

        return OpenAIResponsesModel(config, model_name, key_loader, limiter, http_client)
    from swarmdeck.models.openai_compat import OpenAICompatModel

    return OpenAICompatModel(config, model_name, key_loader, limiter, http_client)
