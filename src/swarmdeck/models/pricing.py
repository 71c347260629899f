"""What a call cost, from the genai-prices tables; None when the model is not priced there."""

from __future__ import annotations

import logging
import sys
import threading
import warnings

from swarmdeck.models.types import Usage

log = logging.getLogger(__name__)

# Our provider keys where genai-prices names the vendor differently.
PROVIDER_IDS = {
    "kimi": "moonshotai",
    "moonshot": "moonshotai",
    "glm": "zhipuai",
    "zai": "zai",
    "openai-responses": "openai",
}


# Taken by the first load_prices_aside and never let go: the tables load once a process.
_warming = threading.Lock()


def load_prices_aside() -> None:
    """Load the price tables in a thread if not yet loaded: a call does it while waiting
    for the model, so pricing its answer does not stall the event loop for ~0.25 s."""
    if "genai_prices.data" in sys.modules or not _warming.acquire(blocking=False):
        return
    threading.Thread(target=load_prices, name="sd-prices", daemon=True).start()


def load_prices() -> None:
    """Import genai-prices with its tables (the first price asked for waits for this)."""
    import genai_prices.data  # noqa: F401


def cost_usd(provider_key: str, model: str, usage: Usage) -> float | None:
    """Price of one call in USD; None for an unknown provider or model. Never raises."""
    # Imported at the first price asked for: it costs ~0.25 s, on every command otherwise.
    import genai_prices

    provider_id = PROVIDER_IDS.get(provider_key, provider_key)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # genai-prices counts cached tokens inside the input total; our Usage keeps them apart.
            priced = genai_prices.Usage(
                input_tokens=usage.input + usage.cache_read + usage.cache_write,
                cache_read_tokens=usage.cache_read,
                cache_write_tokens=usage.cache_write,
                output_tokens=usage.output,
            )
            price = genai_prices.calc_price(priced, model, provider_id=provider_id)
    except LookupError:
        return None
    except Exception as exc:
        log.debug("pricing %s:%s failed: %s", provider_key, model, exc)
        return None
    return float(price.total_price)
