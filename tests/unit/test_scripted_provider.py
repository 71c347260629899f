"""The scripted provider of the demo: its fake server starts on demand in the calling
process (real HTTP through the real SDK), it is never offered to agents, and a missing
script is a clear error."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from swarmdeck.errors import ConfigError
from swarmdeck.models.available import available_models
from swarmdeck.models.factory import build_chat_model
from swarmdeck.models.registry import ProviderConfig, ProviderRegistry
from swarmdeck.models.scripted import serve_script


def test_the_demo_provider_serves_its_script_in_this_process(tmp_path: Path) -> None:
    config = ProviderRegistry.load(tmp_path).get("demo")
    assert config.script == "demo" and config.needs_key is False
    url = serve_script("demo")
    assert url.startswith("http://127.0.0.1:") and serve_script("demo") == url  # one server
    # The scripted model answers over HTTP: the question session's first turn.
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    reply = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "Ask which branch to use."}]
    )
    [choice] = reply.choices
    assert choice.message.tool_calls[0].function.name == "ask_user"
    model = build_chat_model(config, "scripted", lambda: None, limiter=None)  # type: ignore[arg-type]
    assert model.config.base_url == url


def test_a_scripted_model_is_never_offered_to_agents(tmp_path: Path) -> None:
    names = [m.name for m in available_models(ProviderRegistry.load(tmp_path), lambda _: False)]
    assert "demo:scripted" not in names and "ollama:qwen3:8b" in names


def test_a_missing_script_is_a_clear_error() -> None:
    config = ProviderConfig(
        key="x",
        kind="openai",
        base_url="http://127.0.0.1",
        model="m",
        script="nosuch",
        needs_key=False,
    )
    with pytest.raises(ConfigError, match="no packaged script 'nosuch'"):
        build_chat_model(config, "m", lambda: None, limiter=None)  # type: ignore[arg-type]
