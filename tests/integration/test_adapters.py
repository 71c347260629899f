"""Both adapters through the real openai/anthropic SDKs against the fake LLM server on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from swarmdeck.errors import MissingKeyError, ProviderError
from swarmdeck.models import retry
from swarmdeck.models.anthropic import AnthropicModel
from swarmdeck.models.factory import build_chat_model
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.openai_compat import OpenAICompatModel, _Assembly
from swarmdeck.models.openai_responses import OpenAIResponsesModel
from swarmdeck.models.pricing import cost_usd
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.types import ChatModel, Completion, Message, ToolSpec, Usage
from swarmdeck.testing.fake_llm import FakeLLM
from tests.machine_load import stretched_by_load

KEY = "sk-test-" + "Zq9xW8vU7tS6rR5p" * 2
READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file of the workdir.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
TOOL_TURNS = [
    {"text": "Reading it.", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]},
    {"text": "The file says: {{last_tool_result}}"},
]
KINDS = ["openai", "anthropic", "openai-responses"]


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Backoff timing has its own test; elsewhere a short base keeps the suite fast."""
    monkeypatch.setattr(retry, "BACKOFF_BASE_S", 0.02)


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    """A fake LLM server with no quirks; tests set script and quirks."""
    with FakeLLM() as server:
        yield server


class Keys:
    """A key loader that counts how often the key was read."""

    def __init__(self, key: str | None = KEY) -> None:
        self.key = key
        self.calls = 0

    def __call__(self) -> str | None:
        self.calls += 1
        return self.key


def make_model(
    fake: FakeLLM, kind: str = "openai", keys: Keys | None = None, **fields: Any
) -> OpenAICompatModel | AnthropicModel | OpenAIResponsesModel:
    """An adapter aimed at the fake server, with a fresh in-process limiter."""
    config = ProviderConfig(
        key=fields.pop("key", "anthropic" if kind == "anthropic" else "openai"),
        kind=kind,  # type: ignore[arg-type]
        base_url=fake.anthropic_base_url if kind == "anthropic" else fake.openai_base_url,
        model=fields.pop("model", "fake-model"),
        **fields,
    )
    model = build_chat_model(config, config.model, keys or Keys(), ProviderLimiter())
    assert isinstance(model, OpenAICompatModel | AnthropicModel | OpenAIResponsesModel)
    return model


def chat_requests(fake: FakeLLM) -> list[Any]:
    """The chat requests the server received (not model listings)."""
    return [
        r for r in fake.requests if r.path.endswith(("/completions", "/messages", "/responses"))
    ]


async def run_tool_round_trip(model: ChatModel) -> tuple[Completion, Completion]:
    """Turn 1 asks for read_file; we answer it; turn 2 quotes the result."""
    history = [Message("system", "You are terse."), Message("user", "what is in a.txt?")]
    first = await model.complete(history, [READ_FILE])
    history += [
        Message("assistant", first.text, tuple(first.tool_calls), reasoning=first.reasoning),
        Message("tool", "hello from a.txt", tool_call_id=first.tool_calls[0].id),
    ]
    second = await model.complete(history, [READ_FILE])
    return first, second


# --- text, tools, round trips ---------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_streamed_text_reaches_on_delta_and_completion(fake: FakeLLM, kind: str) -> None:
    fake.set_script({"scenarios": [{"turns": [{"text": "Hello there, planner."}]}]})
    model = make_model(fake, kind)
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    completion = await model.complete([Message("user", "hi")], [], on_delta=on_delta)
    assert completion.text == "Hello there, planner."
    assert "".join(seen) == completion.text and len(seen) > 1
    assert completion.tool_calls == []
    assert completion.stop_reason == "stop"
    assert completion.model == "fake-model"
    body = chat_requests(fake)[0].body
    assert body["stream"] is True
    assert "tools" not in body and "tool_choice" not in body


@pytest.mark.parametrize("kind", KINDS)
async def test_tool_call_and_result_round_trip(fake: FakeLLM, kind: str) -> None:
    fake.set_script({"scenarios": [{"turns": TOOL_TURNS}]})
    model = make_model(fake, kind)
    first, second = await run_tool_round_trip(model)
    assert first.stop_reason == "tool_calls"
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("read_file", {"path": "a.txt"})
    ]
    assert first.tool_calls[0].id
    assert second.text == "The file says: hello from a.txt"
    body = chat_requests(fake)[1].body
    if kind == "anthropic":
        # One text block, a prompt-cache breakpoint on it, on the tools and on the last
        # message (see test_prompt_cache.py).
        assert body["system"] == [
            {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}
        ]
        assert body["tools"][0]["input_schema"] == READ_FILE.parameters
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["max_tokens"] == model.config.output_tokens
    elif kind == "openai":  # the Responses API's body: test_responses_adapter.py
        assert body["messages"][0] == {"role": "system", "content": "You are terse."}
        assert body["messages"][-1]["role"] == "tool"


@pytest.mark.parametrize("kind", KINDS)
async def test_an_adapter_keeps_one_connection_for_its_turns(fake: FakeLLM, kind: str) -> None:
    """Turns in a row reuse one kept-alive connection; turns at once open no more
    connections than there were requests in flight."""
    fake.set_script({"scenarios": [{"turns": TOOL_TURNS}]})
    model = make_model(fake, kind)
    try:
        for _ in range(10):
            await run_tool_round_trip(model)
        assert (len(chat_requests(fake)), fake.connections_opened) == (20, 1)
        fake.reset_stats()
        fake.latency = 0.2
        await asyncio.gather(*(run_tool_round_trip(model) for _ in range(5)))
        assert len(chat_requests(fake)) == 10
        # A connection is opened only for a request that found none idle; the second
        # turns find those of the first.
        assert fake.max_concurrent > 1 and fake.connections_opened < fake.max_concurrent
    finally:
        await model.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_aclose_closes_the_pool_of_another_running_loop(fake: FakeLLM, kind: str) -> None:
    """A turn on another thread's loop (the engine's, for queued sessions) opens a pool
    there; aclose() from this loop closes it on its own loop, and this loop's here."""
    fake.set_script({"scenarios": [{"turns": [{"text": "hi"}]}]})
    model = make_model(fake, kind)
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    try:
        there = asyncio.run_coroutine_threadsafe(model.complete([Message("user", "a")], []), other)
        assert (await asyncio.wrap_future(there)).text == "hi"
        assert (await model.complete([Message("user", "b")], [])).text == "hi"
        pools = list(model._http._pools.values())
        assert len(pools) == 2 and not any(p.is_closed for p in pools)
        await model.aclose()
        assert all(p.is_closed for p in pools)
        assert fake.connections_opened == 2
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(5)
        other.close()


async def test_anthropic_merges_consecutive_tool_results(fake: FakeLLM) -> None:
    calls = [
        {"name": "read_file", "arguments": {"path": "a"}},
        {"name": "read_file", "arguments": {"path": "b"}},
    ]
    fake.set_script({"scenarios": [{"turns": [{"tool_calls": calls}, {"text": "ok"}]}]})
    model = make_model(fake, "anthropic")
    history = [Message("user", "read both")]
    first = await model.complete(history, [READ_FILE])
    assert len(first.tool_calls) == 2
    history += [
        Message("assistant", first.text, tuple(first.tool_calls)),
        Message("tool", "A", tool_call_id=first.tool_calls[0].id),
        Message("tool", "no such file", tool_call_id=first.tool_calls[1].id, is_error=True),
    ]
    assert (await model.complete(history, [READ_FILE])).text == "ok"
    last = chat_requests(fake)[-1].body["messages"][-1]
    assert last["role"] == "user"
    assert [b["type"] for b in last["content"]] == ["tool_result", "tool_result"]
    assert last["content"][1]["is_error"] is True


@pytest.mark.parametrize("kind", KINDS)
async def test_malformed_tool_arguments_are_passed_on_raw(fake: FakeLLM, kind: str) -> None:
    turn = {**TOOL_TURNS[0], "fault": {"malformed_arguments": True}}
    fake.set_script({"scenarios": [{"turns": [turn]}]})
    completion = await make_model(fake, kind).complete([Message("user", "go")], [READ_FILE])
    assert completion.tool_calls[0].name == "read_file"
    with pytest.raises(ValueError):
        json.loads(completion.tool_calls[0].arguments)


def test_streamed_tool_name_is_set_once_and_only_arguments_concatenate() -> None:
    acc = _Assembly()
    pieces = [
        {"index": 0, "id": "call_1", "function": {"name": "read_file", "arguments": ""}},
        # Some vendors repeat id and name on every chunk.
        {"index": 0, "id": "call_1", "function": {"name": "read_file", "arguments": '{"pa'}},
        {"index": 1, "id": "call_2", "function": {"name": "grep", "arguments": "{}"}},
        {"index": 0, "function": {"arguments": 'th": "x"}'}},
    ]
    for piece in pieces:
        acc.add_call_delta(piece)
    calls = acc.tool_calls()
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_1", "read_file", '{"path": "x"}'),
        ("call_2", "grep", "{}"),
    ]


# --- vendor quirks --------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["deepseek", "kimi"])
async def test_reasoning_is_collected_and_echoed(fake: FakeLLM, provider: str) -> None:
    fake.quirks = {"reasoning_echo"}
    turns = [{**TOOL_TURNS[0], "reasoning": "The user wants a.txt."}, TOOL_TURNS[1]]
    fake.set_script({"scenarios": [{"turns": turns}]})
    model = make_model(fake, key=provider, quirks=("reasoning_echo",))
    first, second = await run_tool_round_trip(model)
    assert first.reasoning == "The user wants a.txt."
    assert second.text.endswith("hello from a.txt")
    assistant = chat_requests(fake)[1].body["messages"][2]
    assert assistant["reasoning_content"] == "The user wants a.txt."


async def test_reasoning_echo_sends_empty_string_when_none_was_given(fake: FakeLLM) -> None:
    fake.quirks = {"reasoning_echo"}
    fake.set_script({"scenarios": [{"turns": TOOL_TURNS}]})
    model = make_model(fake, key="deepseek", quirks=("reasoning_echo",))
    _, second = await run_tool_round_trip(model)
    assert second.text.endswith("hello from a.txt")
    assert chat_requests(fake)[1].body["messages"][2]["reasoning_content"] == ""


async def test_missing_reasoning_echo_is_a_fatal_bad_request(fake: FakeLLM) -> None:
    # Proves the server enforces the quirk: without it the second turn is refused, once.
    fake.quirks = {"reasoning_echo"}
    fake.set_script({"scenarios": [{"turns": TOOL_TURNS}]})
    model = make_model(fake, key="deepseek")
    with pytest.raises(ProviderError) as info:
        await run_tool_round_trip(model)
    assert not info.value.retryable and info.value.status == 400
    assert "reasoning_content" in info.value.message
    assert len(chat_requests(fake)) == 2


async def test_glm_gets_tool_choice_auto_only(fake: FakeLLM) -> None:
    fake.quirks = {"tool_choice_auto_only"}
    fake.set_script({"scenarios": [{"turns": TOOL_TURNS}]})
    model = make_model(fake, key="glm", quirks=("tool_choice_auto_only",))
    await run_tool_round_trip(model)
    for request in chat_requests(fake):
        assert request.body["tool_choice"] == "auto"
        assert "parallel_tool_calls" not in request.body


async def test_max_completion_tokens_quirk_and_no_stream_usage(fake: FakeLLM) -> None:
    fake.set_script({"scenarios": [{"turns": [{"text": "ok"}]}]})
    openai_like = make_model(fake, quirks=("max_completion_tokens",), output_tokens=1234)
    await openai_like.complete([Message("user", "hi")], [])
    body = chat_requests(fake)[-1].body
    assert body["max_completion_tokens"] == 1234 and "max_tokens" not in body
    assert body["stream_options"] == {"include_usage": True}
    plain = make_model(fake, quirks=("no_stream_usage",))
    completion = await plain.complete([Message("user", "hi")], [])
    assert "stream_options" not in chat_requests(fake)[-1].body
    # The stream carried no counts: they are estimated (a token per 4 characters), and say so.
    assert completion.usage == Usage(input=1, output=1, estimated=True)


# --- usage and cost -------------------------------------------------------------------------


async def test_openai_usage_mapping_and_cost(fake: FakeLLM) -> None:
    usage = {"input": 1000, "output": 300, "reasoning": 120, "cache_read": 400}
    fake.set_script({"scenarios": [{"turns": [{"text": "ok", "usage": usage}]}]})
    model = make_model(fake, model="gpt-4o")
    completion = await model.complete([Message("user", "hi")], [])
    expected = Usage(input=600, output=300, reasoning=120, cache_read=400)
    assert completion.usage == expected
    assert completion.cost_usd == pytest.approx(cost_usd("openai", "gpt-4o", expected))
    assert completion.cost_usd and completion.cost_usd > 0


async def test_anthropic_usage_mapping_and_cost(fake: FakeLLM) -> None:
    usage = {"input": 900, "output": 200, "cache_read": 300, "cache_write": 50}
    fake.set_script({"scenarios": [{"turns": [{"text": "ok", "usage": usage}]}]})
    model = make_model(fake, "anthropic", model="claude-sonnet-5-5")
    completion = await model.complete([Message("user", "hi")], [])
    assert completion.usage == Usage(input=900, output=200, cache_read=300, cache_write=50)
    assert completion.cost_usd == pytest.approx(
        cost_usd("anthropic", "claude-sonnet-5-5", completion.usage)
    )


async def test_unknown_model_has_no_cost(fake: FakeLLM) -> None:
    fake.set_script({"scenarios": [{"turns": [{"text": "ok"}]}]})
    completion = await make_model(fake, model="my-local-model").complete(
        [Message("user", "hi")], []
    )
    assert completion.cost_usd is None


# --- retries and fatal errors ---------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_429_with_retry_after_waits_the_cooldown_then_succeeds(
    fake: FakeLLM, kind: str
) -> None:
    fault = {"status": 429, "retry_after": 0.4, "times": 1}
    fake.set_script({"scenarios": [{"turns": [{"text": "finally", "fault": fault}]}]})
    keys = Keys()
    model = make_model(fake, kind, keys)
    started = time.monotonic()
    completion = await model.complete([Message("user", "hi")], [])
    assert completion.text == "finally"
    requests = chat_requests(fake)
    assert len(requests) == 2
    assert requests[1].timestamp - requests[0].timestamp >= 0.4
    # The cooldown's 0.4 s, not a backoff of seconds on top.
    assert time.monotonic() - started < stretched_by_load(3)
    # The key is read for every attempt, right before the call, and never kept.
    assert keys.calls >= 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fault", [{"status": 500, "times": 1}, {"cut_stream": True, "times": 1}])
async def test_server_errors_and_cut_streams_are_retried(
    fake: FakeLLM, kind: str, fault: dict[str, Any]
) -> None:
    fake.set_script({"scenarios": [{"turns": [{"text": "recovered", "fault": fault}]}]})
    completion = await make_model(fake, kind).complete([Message("user", "hi")], [])
    assert completion.text == "recovered"
    assert len(chat_requests(fake)) == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ({"status": 401}, "bad key"),
        ({"status": 402}, "no balance"),
        (
            {
                "status": 429,
                "retry_after": 1,
                "body": {"error": {"code": "1113", "message": "余额不足"}},
            },
            "quota exhausted",
        ),
        (
            {
                "status": 429,
                "body": {
                    "error": {
                        "message": "quota",
                        "type": "insufficient_quota",
                        "code": "insufficient_quota",
                    }
                },
            },
            "quota exhausted",
        ),
    ],
)
async def test_fatal_errors_are_not_retried(
    fake: FakeLLM, kind: str, fault: dict[str, Any], words: str
) -> None:
    fake.set_script({"scenarios": [{"turns": [{"text": "never", "fault": fault}]}]})
    with pytest.raises(ProviderError) as info:
        await make_model(fake, kind, key="glm").complete([Message("user", "hi")], [])
    assert not info.value.retryable
    assert words in info.value.message
    assert len(chat_requests(fake)) == 1


def test_backoff_is_exponential_with_jitter_and_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "BACKOFF_BASE_S", 0.5)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (7, 30.0), (20, 30.0)]:
        delays = {retry.backoff_delay(attempt) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1


async def test_retryable_errors_give_up_after_max_attempts(fake: FakeLLM) -> None:
    fake.set_script({"scenarios": [{"turns": [{"text": "never", "fault": {"status": 503}}]}]})
    with pytest.raises(ProviderError) as info:
        await make_model(fake, max_attempts=2).complete([Message("user", "hi")], [])
    assert info.value.retryable and info.value.status == 503
    assert "gave up after 2 attempts" in info.value.message
    assert len(chat_requests(fake)) == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_endpoint_not_answering_is_a_clear_error(kind: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}" + ("/v1" if kind == "openai" else "")
    config = ProviderConfig(key="vllm", kind=kind, base_url=base_url, model="m", max_attempts=2)  # type: ignore[arg-type]
    model = build_chat_model(config, "m", Keys(), ProviderLimiter())
    with pytest.raises(ProviderError) as info:
        await model.complete([Message("user", "hi")], [])
    assert info.value.message.startswith(f"cannot reach {base_url}")
    assert "swarmdeck provider ls" in info.value.hint


# --- the key --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_key_is_sent_but_never_kept_or_echoed(fake: FakeLLM, kind: str) -> None:
    body = {
        "error": {"message": f"Incorrect API key provided: {KEY}", "type": "authentication_error"}
    }
    fake.set_script(
        {"scenarios": [{"turns": [{"text": "x", "fault": {"status": 401, "body": body}}]}]}
    )
    model = make_model(fake, kind)
    with pytest.raises(ProviderError) as info:
        await model.complete([Message("user", "hi")], [])
    sent = chat_requests(fake)[0].headers
    assert KEY in (sent.get("authorization", "") + sent.get("x-api-key", ""))
    error = info.value
    assert KEY not in error.one_line()
    assert error.__cause__ is None and error.__context__ is None
    http = model._http.get()
    assert KEY not in repr(vars(model)) and KEY not in str(dict(http.headers))


async def test_missing_key_fails_before_any_request(fake: FakeLLM) -> None:
    config = ProviderConfig(key="kimi", kind="openai", base_url=fake.openai_base_url, model="m")
    with pytest.raises(MissingKeyError) as info:
        build_chat_model(config, "m", Keys(None), ProviderLimiter())
    assert info.value.hint == "run `swarmdeck key set kimi`"
    assert chat_requests(fake) == []


async def test_keyless_provider_works_without_a_key(fake: FakeLLM) -> None:
    fake.set_script({"scenarios": [{"turns": [{"text": "local"}]}]})
    model = make_model(fake, "openai", Keys(None), key="ollama", needs_key=False)
    assert (await model.complete([Message("user", "hi")], [])).text == "local"


async def test_an_idle_connection_outlives_httpx_s_five_seconds(fake: FakeLLM) -> None:
    """With 1,000 sessions a pooled connection waits its turn longer than 5 s; expiring it
    then made nearly every request open a new one (bench/concurrency.py)."""
    fake.set_script({"scenarios": [{"turns": [{"text": "ok"}]}]})
    fake.latency = 0.1
    model = make_model(fake)
    try:
        await asyncio.gather(*(model.complete([Message("user", "hi")], []) for _ in range(2)))
        await asyncio.sleep(6)  # idle past the old 5 s expiry: the thing under test
        await asyncio.gather(*(model.complete([Message("user", "hi")], []) for _ in range(2)))
        assert (len(chat_requests(fake)), fake.connections_opened) == (4, 2)
    finally:
        await model.aclose()
