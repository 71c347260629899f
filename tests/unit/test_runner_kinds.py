"""Which providers a runner may be pointed at: the kinds whose servers speak its wire."""

from __future__ import annotations

import pytest

from swarmdeck.dispatch.plan import choose_runner
from swarmdeck.errors import UsageError
from swarmdeck.models.registry import ProviderConfig


def _provider(kind: str) -> ProviderConfig:
    return ProviderConfig(key="p", kind=kind, base_url="http://127.0.0.1:9/v1", model="m")


@pytest.mark.parametrize(
    ("runner", "kind"),
    [
        ("codex", "openai"),
        ("codex", "openai-responses"),  # Codex speaks the Responses API
        ("opencode", "openai"),
        ("claude", "anthropic"),
    ],
)
def test_a_runner_takes_a_provider_of_its_wire(runner: str, kind: str) -> None:
    assert choose_runner(runner, _provider(kind), None) == runner


@pytest.mark.parametrize(
    ("runner", "kind"),
    [("codex", "anthropic"), ("opencode", "openai-responses"), ("claude", "openai")],
)
def test_a_runner_refuses_a_provider_of_another_wire(runner: str, kind: str) -> None:
    with pytest.raises(UsageError, match=f"runner {runner} speaks the"):
        choose_runner(runner, _provider(kind), None)
