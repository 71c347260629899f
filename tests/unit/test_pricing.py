"""Cost per call from genai-prices; unknown models cost None, never an exception."""

from __future__ import annotations

import subprocess
import sys

import pytest

from swarmdeck.models.pricing import cost_usd
from swarmdeck.models.types import Usage


def test_known_openai_model_is_priced_with_cached_tokens_cheaper() -> None:
    plain = cost_usd("openai", "gpt-4o", Usage(input=1000, output=500))
    cached = cost_usd("openai", "gpt-4o", Usage(input=800, output=500, cache_read=200))
    # gpt-4o: $2.50 in, $1.25 cached, $10 out per million tokens.
    assert plain == pytest.approx(0.0075)
    assert cached == pytest.approx(0.00725)


def test_anthropic_cache_writes_cost_more_than_plain_input() -> None:
    plain = cost_usd("anthropic", "claude-sonnet-5-5", Usage(input=1000, output=0))
    written = cost_usd("anthropic", "claude-sonnet-5-5", Usage(input=0, output=0, cache_write=1000))
    assert plain is not None and written is not None
    assert written > plain


@pytest.mark.parametrize(
    ("provider", "model"),
    [("kimi", "kimi-k2.6"), ("glm", "glm-4.7"), ("deepseek", "deepseek-chat")],
)
def test_vendor_keys_map_to_genai_prices_providers(provider: str, model: str) -> None:
    cost = cost_usd(provider, model, Usage(input=1000, output=1000))
    assert cost is not None and cost > 0


@pytest.mark.parametrize(
    ("provider", "model"),
    [("openai", "no-such-model"), ("ollama", "qwen3:8b"), ("vllm", "Qwen/Qwen3-8B"), ("", "")],
)
def test_unknown_model_or_provider_is_none(provider: str, model: str) -> None:
    assert cost_usd(provider, model, Usage(input=10, output=10)) is None


def test_bad_usage_never_raises() -> None:
    result = cost_usd("openai", "gpt-4o", Usage(input=-5, output=-1))
    assert result is None or isinstance(result, float)


# A fresh interpreter: this one loaded the tables already.
PRICES_ASIDE = """
import sys, threading
from swarmdeck.models.pricing import load_prices_aside
load_prices_aside()
load_prices_aside()  # one thread, however many calls ask while it loads
aside = [t for t in threading.enumerate() if t.name == "sd-prices"]
assert len(aside) == 1, aside
aside[0].join(30)
assert "genai_prices.data" in sys.modules
load_prices_aside()  # loaded: nothing more starts
assert not [t for t in threading.enumerate() if t.name == "sd-prices"]
print("ok")
"""


def test_the_price_tables_load_in_a_thread_once() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PRICES_ASIDE], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "ok", done.stderr
