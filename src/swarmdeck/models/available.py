"""Which `provider:model` names a session may use right now: the configured providers that
are ready (a key stored, or none needed), with context size and prices where known."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass

from swarmdeck.models.pricing import cost_usd
from swarmdeck.models.registry import ProviderConfig, ProviderRegistry
from swarmdeck.models.types import Usage

MTOK = 1_000_000


@dataclass(frozen=True)
class ModelInfo:
    """One model a session may name."""

    name: str  # provider:model, exactly as spawn_agent(model=...) takes it
    context_tokens: int
    output_tokens: int
    input_usd_per_mtok: float | None
    output_usd_per_mtok: float | None

    def as_dict(self) -> dict[str, object]:
        """Plain data for a tool result."""
        return asdict(self)


@functools.lru_cache(maxsize=256)
def _prices(provider: str, model: str) -> tuple[float | None, float | None]:
    return cost_usd(provider, model, Usage(input=MTOK)), cost_usd(
        provider, model, Usage(output=MTOK)
    )


def _models_of(config: ProviderConfig) -> list[str]:
    return list(config.models) if config.models else [config.model]


def ready_providers(
    registry: ProviderRegistry, has_key: Callable[[str], bool]
) -> list[ProviderConfig]:
    """The providers a session may use now: keyed (or needing no key), scripted ones aside
    (a scripted model answers its own script only: never one to choose)."""
    return [c for c in registry.all() if (not c.needs_key or has_key(c.key)) and c.script is None]


def available_models(registry: ProviderRegistry, has_key: Callable[[str], bool]) -> list[ModelInfo]:
    """Every model of every ready provider, sorted by name."""
    found: list[ModelInfo] = []
    for config in ready_providers(registry, has_key):
        for model in _models_of(config):
            price_in, price_out = _prices(config.key, model)
            found.append(
                ModelInfo(
                    f"{config.key}:{model}",
                    config.context_tokens,
                    config.output_tokens,
                    price_in,
                    price_out,
                )
            )
    return sorted(found, key=lambda m: m.name)


def normalize(registry: ProviderRegistry, name: str) -> str:
    """`provider` or `provider:model` as the exact `provider:model` (raises when unknown)."""
    config, model = registry.resolve(name)
    return f"{config.key}:{model}"
