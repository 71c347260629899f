"""The GenAI client metric swarmdeck records: `gen_ai.client.token.usage`, a histogram of the
tokens of each model call, by token type, provider and model (OpenTelemetry GenAI semantic
conventions, model/gen-ai/gen-ai-client-metrics.yaml)."""

from __future__ import annotations

from typing import Any

TOKEN_USAGE = "gen_ai.client.token.usage"
# The conventions' bucket boundaries for token counts (powers of four up to 64M).
TOKEN_BUCKETS = [4**n for n in range(14)]


def token_usage_histogram(meter_provider: Any) -> Any:
    """The histogram on this meter provider (None without one: no metrics asked for)."""
    if meter_provider is None:
        return None
    meter = meter_provider.get_meter("swarmdeck")
    return meter.create_histogram(
        TOKEN_USAGE,
        unit="{token}",
        description="Measures number of input and output tokens used",
        explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
    )


def record_token_usage(histogram: Any, info: Any, usage: Any) -> None:
    """One model call's input (cached or not, as the conventions count it) and output."""
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": info.provider,
        "gen_ai.request.model": info.model,
    }
    histogram.record(
        usage.input + usage.cache_read + usage.cache_write,
        {**common, "gen_ai.token.type": "input"},
    )
    histogram.record(usage.output, {**common, "gen_ai.token.type": "output"})
