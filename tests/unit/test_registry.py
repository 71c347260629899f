"""The provider registry: packaged files, user overrides, validation errors, provider:model."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.errors import ConfigError, UnknownProviderError
from swarmdeck.models.registry import ProviderConfig, ProviderRegistry

PACKAGED = {
    "openai",
    "openai-responses",
    "anthropic",
    "deepseek",
    "kimi",
    "glm",
    "ollama",
    "vllm",
    "demo",
}


def test_packaged_providers_load_with_their_quirks(tmp_path: Path) -> None:
    registry = ProviderRegistry.load(tmp_path / "missing")
    assert {c.key for c in registry.all()} == PACKAGED
    assert registry.get("deepseek").has_quirk("reasoning_echo")
    assert registry.get("kimi").has_quirk("reasoning_echo")
    assert registry.get("glm").quirks == ("tool_choice_auto_only",)
    assert registry.get("anthropic").kind == "anthropic"
    assert registry.get("kimi").base_url == "https://api.moonshot.ai/v1"
    assert registry.get("glm").base_url == "https://open.bigmodel.cn/api/paas/v4"
    for key in ("ollama", "vllm"):
        assert registry.get(key).needs_key is False
        assert registry.get(key).base_url.startswith("http://127.0.0.1:")
    assert all(c.network is False for c in registry.all())
    assert registry.source("openai") == "packaged"


def test_user_file_replaces_packaged_provider(tmp_path: Path) -> None:
    (tmp_path / "glm.yaml").write_text(
        "kind: openai\nbase_url: https://example.test/v4\nmodel: glm-x\nconcurrency: 2\n"
    )
    registry = ProviderRegistry.load(tmp_path)
    glm = registry.get("glm")
    assert (glm.base_url, glm.model, glm.concurrency) == ("https://example.test/v4", "glm-x", 2)
    # A replaced provider keeps nothing of the packaged file (quirks included).
    assert glm.quirks == ()
    assert registry.source("glm") == str(tmp_path / "glm.yaml")


def test_malformed_packaged_style_error_names_file_and_field(tmp_path: Path) -> None:
    (tmp_path / "glm.yaml").write_text(
        "kind: openai\nbase_url: https://x.test\nmodel: m\nconcurrency: lots\n"
    )
    with pytest.raises(ConfigError) as info:
        ProviderRegistry.load(tmp_path)
    assert str(tmp_path / "glm.yaml") in info.value.message
    assert "field 'concurrency': Input should be a valid integer" in info.value.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "kind: openai\nbase_url: https://x.test\nmodel: m\ncolour: red\n",
            "field 'colour': unknown field",
        ),
        ("kind: openai\nbase_url: https://x.test\n", "field 'model': Field required"),
        ("kind: azure\nbase_url: https://x.test\nmodel: m\n", "field 'kind'"),
        (
            "kind: openai\nbase_url: https://x.test\nmodel: m\nquirks: [warp_drive]\n",
            "field 'quirks.0'",
        ),
        ("kind: openai\nbase_url: x.test\nmodel: m\n", "field 'base_url'"),
        ("kind: openai\nbase_url: https://x.test\nmodel: a\nmodels: [b]\n", "default model 'a'"),
        (
            "key: other\nkind: openai\nbase_url: https://x.test\nmodel: m\n",
            "does not match the file name",
        ),
        ("kind: [openai\n", "invalid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
    ],
)
def test_every_malformed_file_is_an_error_never_skipped(
    tmp_path: Path, text: str, expected: str
) -> None:
    (tmp_path / "mine.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        ProviderRegistry.load(tmp_path)
    assert "mine.yaml" in info.value.message
    assert expected in info.value.message
    assert "\n" not in info.value.one_line()


def test_resolve_provider_and_model(tmp_path: Path) -> None:
    registry = ProviderRegistry.load(tmp_path)
    config, model = registry.resolve("deepseek")
    assert (config.key, model) == ("deepseek", "deepseek-chat")
    assert registry.resolve("deepseek:deepseek-v4-pro")[1] == "deepseek-v4-pro"
    # Ollama tags contain a colon; only the first one separates the provider.
    assert registry.resolve("ollama:qwen3:32b")[1] == "qwen3:32b"
    assert registry.resolve("openai:")[1] == registry.get("openai").model


def test_unknown_provider_lists_known_ones_with_hint(tmp_path: Path) -> None:
    registry = ProviderRegistry.load(tmp_path)
    with pytest.raises(UnknownProviderError) as info:
        registry.resolve("mistral:large")
    assert "mistral" in info.value.message
    assert "deepseek" in info.value.message and "glm" in info.value.message
    assert "swarmdeck provider ls" in info.value.hint


def test_model_outside_the_allowed_list_is_refused(tmp_path: Path) -> None:
    (tmp_path / "deepseek.yaml").write_text(
        "kind: openai\nbase_url: https://api.deepseek.com\nmodel: deepseek-chat\n"
        "models: [deepseek-chat, deepseek-reasoner]\nquirks: [reasoning_echo]\n"
    )
    registry = ProviderRegistry.load(tmp_path)
    assert registry.resolve("deepseek:deepseek-reasoner")[1] == "deepseek-reasoner"
    with pytest.raises(UnknownProviderError) as info:
        registry.resolve("deepseek:gpt-5")
    assert "deepseek-chat, deepseek-reasoner" in info.value.message


def test_add_writes_user_file_and_remove_restores_packaged(tmp_path: Path) -> None:
    registry = ProviderRegistry.load(tmp_path)
    custom = ProviderConfig(
        key="glm", kind="openai", base_url="https://proxy.test/v4", model="glm-5", rpm=30
    )
    path = registry.add(custom, tmp_path)
    assert path == tmp_path / "glm.yaml"
    assert registry.get("glm").base_url == "https://proxy.test/v4"
    assert ProviderRegistry.load(tmp_path).get("glm") == custom

    registry.remove("glm", tmp_path)
    assert not path.exists()
    assert registry.get("glm").base_url == "https://open.bigmodel.cn/api/paas/v4"


def test_user_only_provider_can_be_added_and_removed(tmp_path: Path) -> None:
    registry = ProviderRegistry.load(tmp_path)
    lab = ProviderConfig(
        key="lab", kind="openai", base_url="http://10.0.0.5:8000/v1", model="m", needs_key=False
    )
    registry.add(lab, tmp_path)
    assert ProviderRegistry.load(tmp_path).get("lab") == lab
    registry.remove("lab", tmp_path)
    with pytest.raises(UnknownProviderError):
        registry.get("lab")
    with pytest.raises(UnknownProviderError):
        registry.remove("lab", tmp_path)


def test_packaged_provider_cannot_be_removed(tmp_path: Path) -> None:
    registry = ProviderRegistry.load(tmp_path)
    with pytest.raises(ConfigError) as info:
        registry.remove("openai", tmp_path)
    assert "packaged" in info.value.message
    assert info.value.hint


def test_config_is_frozen_so_routing_cannot_change() -> None:
    config = ProviderConfig(key="x", kind="openai", base_url="https://x.test/", model="m")
    assert config.base_url == "https://x.test"
    with pytest.raises(ValueError):
        config.base_url = "https://evil.test"  # type: ignore[misc]


def test_the_shortest_cached_prefix_is_the_vendors_unless_set(tmp_path: Path) -> None:
    """What a family's shared prefix is filled up to (runtime/offered.py): 1,024 tokens on
    Anthropic's and OpenAI's own endpoints, nothing where an OpenAI-compatible server
    caches short prefixes (vLLM, llama.cpp, DeepSeek), and what the file says over both."""
    registry = ProviderRegistry.load(tmp_path / "missing")
    assert registry.get("anthropic").cache_min_tokens == 1024
    assert registry.get("openai").cache_min_tokens == 1024
    assert registry.get("openai-responses").cache_min_tokens == 1024
    assert registry.get("deepseek").cache_min_tokens == 0
    assert registry.get("vllm").cache_min_tokens == 0
    lab = dict(key="lab", kind="openai", base_url="http://10.0.0.5:8000/v1", model="m")
    assert ProviderConfig(**lab).cache_min_tokens == 0
    assert ProviderConfig(**lab, prompt_cache_min_tokens=2048).cache_min_tokens == 2048
    assert (
        ProviderConfig(**{**lab, "kind": "anthropic"}, prompt_cache_min_tokens=0).cache_min_tokens
        == 0
    )
