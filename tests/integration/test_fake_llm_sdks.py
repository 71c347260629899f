"""The fake LLM server driven by the real openai and anthropic SDK clients."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from tests.machine_load import stretched_by_load

TOOL_TURNS: dict[str, Any] = {
    "scenarios": [
        {
            "turns": [
                {
                    "text": "I will read the file.",
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": "README.md"}},
                        {"name": "list_dir", "arguments": {"path": ".", "depth": 2}},
                    ],
                },
                {"text": "Done: {{last_tool_result}}"},
            ]
        }
    ]
}
TOOLS_OPENAI: list[Any] = [
    {
        "type": "function",
        "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}},
    }
]
TOOLS_ANTHROPIC: list[Any] = [
    {"name": "read_file", "input_schema": {"type": "object", "properties": {}}}
]


_open_clients: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []
FRONTENDS = ["threads", "asyncio"]


@pytest.fixture(params=FRONTENDS)
def fake_llm(request: pytest.FixtureRequest) -> Iterator[FakeLLM]:
    """The fake server on each of its front ends: they must answer alike."""
    with FakeLLM(frontend=request.param) as server:
        yield server


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    """Close the SDK clients a test made, so no connection outlives its event loop."""
    # Left by a test that ran its own loop (asyncio.run): that loop, and the clients'
    # sockets with it, is gone, and closing them on this one raises "Event loop is closed".
    _open_clients.clear()
    yield
    while _open_clients:
        await _open_clients.pop().close()


def one_turn(**turn: Any) -> dict[str, Any]:
    """A script with a single scenario of a single turn."""
    return {"scenarios": [{"turns": [turn]}]}


def oai(fake: FakeLLM, retries: int = 0) -> openai.AsyncOpenAI:
    """A real OpenAI client on the fake server."""
    client = openai.AsyncOpenAI(
        base_url=fake.openai_base_url,
        api_key="x",
        max_retries=retries,
        # Plain HTTP on loopback: skipping the CA bundle makes each client ~10x cheaper.
        http_client=openai.DefaultAsyncHttpxClient(verify=False),
    )
    _open_clients.append(client)
    return client


def ant(fake: FakeLLM, retries: int = 0) -> anthropic.AsyncAnthropic:
    """A real Anthropic client on the fake server."""
    client = anthropic.AsyncAnthropic(
        base_url=fake.anthropic_base_url,
        api_key="x",
        max_retries=retries,
        http_client=anthropic.DefaultAsyncHttpxClient(verify=False),
    )
    _open_clients.append(client)
    return client


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def ask_openai(fake: FakeLLM, text: str = "task", **kwargs: Any) -> Any:
    """One plain Chat Completions call."""
    messages = kwargs.pop("messages", [user(text)])
    return await oai(fake).chat.completions.create(model="m", messages=messages, **kwargs)


async def ask_anthropic(fake: FakeLLM, text: str = "task", **kwargs: Any) -> Any:
    """One plain Messages call."""
    messages = kwargs.pop("messages", [user(text)])
    return await ant(fake).messages.create(model="m", max_tokens=100, messages=messages, **kwargs)


def raw_post(fake: FakeLLM, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST raw bytes, for requests the SDKs would refuse to send."""
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


# --- OpenAI -----------------------------------------------------------------------------


async def test_openai_plain_text_and_default_usage(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="Hello there"))
    result = await ask_openai(fake_llm, "x" * 40)
    message = result.choices[0].message
    assert message.content == "Hello there"
    assert message.tool_calls is None
    assert result.choices[0].finish_reason == "stop"
    assert result.model == "m"
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (10, 2)
    assert result.usage.prompt_tokens_details is None


async def test_openai_streamed_text_with_usage_chunk(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(
        one_turn(
            text="one two three four",
            reasoning="thinking hard",
            usage={"input": 100, "output": 20, "reasoning": 5, "cache_read": 10},
        )
    )
    stream = await oai(fake_llm).chat.completions.create(
        model="m", messages=[user("t")], stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) > 1
    assert "".join(texts) == "one two three four"
    reasoning = [
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") for c in chunks if c.choices
    ]
    assert "".join(r for r in reasoning if r) == "thinking hard"
    assert chunks[-2].choices[0].finish_reason == "stop"
    final = chunks[-1]
    assert final.choices == []
    assert final.usage is not None
    assert (final.usage.prompt_tokens, final.usage.completion_tokens) == (100, 20)
    assert final.usage.prompt_tokens_details is not None
    assert final.usage.prompt_tokens_details.cached_tokens == 10
    assert final.usage.completion_tokens_details is not None
    assert final.usage.completion_tokens_details.reasoning_tokens == 5
    assert all(c.usage is None for c in chunks[:-1])


async def test_openai_stream_without_include_usage_has_no_usage(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="hi"))
    stream = await oai(fake_llm).chat.completions.create(
        model="m", messages=[user("t")], stream=True
    )
    chunks = [chunk async for chunk in stream]
    assert all(c.usage is None and c.choices for c in chunks)


async def test_openai_plain_tool_calls_and_reasoning(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(
        {"scenarios": [{"turns": [{**TOOL_TURNS["scenarios"][0]["turns"][0], "reasoning": "r"}]}]}
    )
    result = await ask_openai(fake_llm, tools=TOOLS_OPENAI)
    message = result.choices[0].message
    assert result.choices[0].finish_reason == "tool_calls"
    assert message.content == "I will read the file."
    assert (message.model_extra or {})["reasoning_content"] == "r"
    calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]
    assert calls == [
        ("call_0_0", "read_file", {"path": "README.md"}),
        ("call_0_1", "list_dir", {"path": ".", "depth": 2}),
    ]


async def test_openai_streamed_tool_calls_send_id_and_name_once(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(TOOL_TURNS)
    stream = await oai(fake_llm).chat.completions.create(
        model="m", messages=[user("t")], stream=True
    )
    deltas = [call async for chunk in stream for call in (chunk.choices[0].delta.tool_calls or [])]
    for index in (0, 1):
        mine = [d for d in deltas if d.index == index]
        assert mine[0].id == f"call_0_{index}"
        assert mine[0].function is not None
        assert mine[0].function.name in ("read_file", "list_dir")
        assert all(d.id is None and d.function.name is None for d in mine[1:])  # type: ignore[union-attr]
        assert len([d for d in mine if d.function and d.function.arguments]) >= 2


async def test_openai_stream_helper_reassembles_tool_calls(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(TOOL_TURNS)
    async with oai(fake_llm).chat.completions.stream(
        model="m", messages=[user("t")], tools=TOOLS_OPENAI
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "I will read the file."
    assert message.tool_calls is not None
    calls = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]
    assert calls == [
        ("call_0_0", "read_file", {"path": "README.md"}),
        ("call_0_1", "list_dir", {"path": ".", "depth": 2}),
    ]


async def test_openai_conversation_uses_last_tool_result(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(TOOL_TURNS)
    first = (await ask_openai(fake_llm)).choices[0].message
    history = [
        user("task"),
        first.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_0_0", "content": "# project"},
        {"role": "tool", "tool_call_id": "call_0_1", "content": "README.md app.py"},
    ]
    second = await ask_openai(fake_llm, messages=history)
    assert second.choices[0].message.content == "Done: README.md app.py"
    third = await ask_openai(
        fake_llm, messages=[*history, second.choices[0].message.model_dump(exclude_none=True)]
    )
    assert third.choices[0].message.content == "(script exhausted)"


# --- Anthropic ---------------------------------------------------------------------------


async def test_anthropic_plain_text_and_usage(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(
        one_turn(text="Hello", usage={"input": 50, "output": 7, "cache_read": 3, "cache_write": 4})
    )
    message = await ask_anthropic(fake_llm)
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Hello"
    assert message.stop_reason == "end_turn"
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens) == (50, 7)
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (3, 4)


async def test_anthropic_raw_stream_event_sequence(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(TOOL_TURNS)
    stream = await ant(fake_llm).messages.create(
        model="m", max_tokens=100, messages=[user("t")], stream=True
    )
    events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e for e in events if e.type == "content_block_start"]
    assert [s.content_block.type for s in starts] == ["text", "tool_use", "tool_use"]
    assert kinds.count("content_block_stop") == 3
    json_pieces = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta" and e.index == 1
    ]
    assert len(json_pieces) >= 2
    assert json.loads("".join(json_pieces)) == {"path": "README.md"}
    delta = events[-2]
    assert delta.delta.stop_reason == "tool_use"
    assert delta.usage.output_tokens >= 1


async def test_anthropic_stream_helper_text_and_tools(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(TOOL_TURNS)
    texts: list[str] = []
    async with ant(fake_llm).messages.stream(
        model="m", max_tokens=100, messages=[user("t")], tools=TOOLS_ANTHROPIC
    ) as stream:
        async for text in stream.text_stream:
            texts.append(text)
        final = await stream.get_final_message()
    assert len(texts) > 1
    assert "".join(texts) == "I will read the file."
    uses = [(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"]
    assert uses == [
        ("toolu_0_0", "read_file", {"path": "README.md"}),
        ("toolu_0_1", "list_dir", {"path": ".", "depth": 2}),
    ]
    assert final.stop_reason == "tool_use"


async def test_anthropic_conversation_uses_last_tool_result(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(TOOL_TURNS)
    first = await ask_anthropic(fake_llm)
    results = [
        {"type": "tool_result", "tool_use_id": "toolu_0_0", "content": "ignored"},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_0_1",
            "content": [{"type": "text", "text": "two files"}],
        },
    ]
    history = [
        user("task"),
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": results},
    ]
    second = await ask_anthropic(fake_llm, messages=history)
    assert second.content[0].text == "Done: two files"


# --- faults -------------------------------------------------------------------------------


async def test_429_with_retry_after_in_both_vendor_shapes(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="x", fault={"status": 429, "retry_after": 2}))
    with pytest.raises(openai.RateLimitError) as oai_err:
        await ask_openai(fake_llm)
    assert oai_err.value.status_code == 429
    assert oai_err.value.response.headers["retry-after"] == "2"
    assert oai_err.value.code == "rate_limit_exceeded"
    with pytest.raises(anthropic.RateLimitError) as ant_err:
        await ask_anthropic(fake_llm)
    assert ant_err.value.response.headers["retry-after"] == "2"
    assert ant_err.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "rate limit exceeded"},
    }


async def test_scripted_error_body_overrides_the_vendor_shape(fake_llm: FakeLLM) -> None:
    glm = {"error": {"code": "1113", "message": "insufficient balance"}}
    fake_llm.set_script(one_turn(fault={"status": 429, "body": glm}))
    with pytest.raises(openai.RateLimitError) as err:
        await ask_openai(fake_llm)
    assert err.value.code == "1113"
    assert err.value.message.endswith("insufficient balance")
    assert "retry-after" not in err.value.response.headers


async def test_times_limited_fault_lets_a_client_retry_succeed(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok", fault={"status": 500, "times": 1, "retry_after": 0.01}))
    with pytest.raises(openai.InternalServerError):
        await ask_openai(fake_llm, "first conversation")
    result = await oai(fake_llm, retries=2).chat.completions.create(
        model="m", messages=[user("second conversation")]
    )
    assert result.choices[0].message.content == "ok"
    assert len(fake_llm.requests) == 3
    # The first conversation used up its failure too.
    assert (await ask_openai(fake_llm, "first conversation")).choices[0].message.content == "ok"


@pytest.mark.parametrize(
    ("status", "oai_error", "ant_error"),
    [
        (401, openai.AuthenticationError, anthropic.AuthenticationError),
        (402, openai.APIStatusError, anthropic.APIStatusError),
        (500, openai.InternalServerError, anthropic.InternalServerError),
    ],
)
async def test_status_faults(
    fake_llm: FakeLLM, status: int, oai_error: type[Exception], ant_error: type[Exception]
) -> None:
    fake_llm.set_script(one_turn(fault={"status": status}))
    with pytest.raises(oai_error) as err:
        await ask_openai(fake_llm)
    assert getattr(err.value, "status_code", None) == status
    with pytest.raises(ant_error) as aerr:
        await ask_anthropic(fake_llm)
    assert getattr(aerr.value, "status_code", None) == status


async def test_cut_stream_raises_in_both_sdks(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="one two three four five six", fault={"cut_stream": True}))
    received: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        stream = await oai(fake_llm).chat.completions.create(
            model="m", messages=[user("t")], stream=True
        )
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    assert 0 < len("".join(received)) < len("one two three four five six")
    with pytest.raises((anthropic.APIConnectionError, httpx2.TransportError)):
        async with ant(fake_llm).messages.stream(
            model="m", max_tokens=10, messages=[user("t")]
        ) as stream:
            async for _ in stream:
                pass
    with pytest.raises(openai.APIConnectionError):
        await ask_openai(fake_llm)


async def test_malformed_arguments_are_delivered_verbatim(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(
        one_turn(
            tool_calls=[{"name": "read_file", "arguments": {"path": "README.md"}}],
            fault={"malformed_arguments": True},
        )
    )
    broken = '{"path": "README.md"'
    plain = await ask_openai(fake_llm)
    assert plain.choices[0].message.tool_calls[0].function.arguments == broken
    assert plain.choices[0].message.content is None
    stream = await oai(fake_llm).chat.completions.create(
        model="m", messages=[user("t")], stream=True
    )
    pieces = [
        call.function.arguments or ""
        async for chunk in stream
        for call in (chunk.choices[0].delta.tool_calls or [])
        if call.function
    ]
    assert "".join(pieces) == broken
    raw = await ant(fake_llm).messages.create(
        model="m", max_tokens=10, messages=[user("t")], stream=True
    )
    partial = [
        e.delta.partial_json
        async for e in raw
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert "".join(partial) == broken


async def test_raw_string_arguments_are_sent_as_is(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(tool_calls=[{"name": "f", "arguments": '{"a":1,  "b":[2]}'}]))
    result = await ask_openai(fake_llm)
    assert result.choices[0].message.tool_calls[0].function.arguments == '{"a":1,  "b":[2]}'


async def test_delay_and_latency(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="slow", delay=0.2))
    fake_llm.latency = 0.1
    started = time.monotonic()
    await ask_openai(fake_llm)
    assert time.monotonic() - started >= 0.3


# --- quirks and validation -------------------------------------------------------------------


def tool_history(reasoning: str | None) -> list[dict[str, Any]]:
    """A conversation with one answered tool call."""
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_0_0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    if reasoning is not None:
        assistant["reasoning_content"] = reasoning
    return [user("t"), assistant, {"role": "tool", "tool_call_id": "call_0_0", "content": "r"}]


async def test_reasoning_echo_quirk(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    fake_llm.quirks = {"reasoning_echo"}
    with pytest.raises(openai.BadRequestError, match="reasoning_content is missing"):
        await ask_openai(fake_llm, messages=tool_history(None))
    result = await ask_openai(fake_llm, messages=tool_history("because"))
    assert result.choices[0].message.content == "(script exhausted)"


async def test_tool_choice_auto_only_quirk(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    fake_llm.quirks = {"tool_choice_auto_only"}
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        await ask_openai(fake_llm, tools=TOOLS_OPENAI, tool_choice="required")
    assert (await ask_openai(fake_llm, tools=TOOLS_OPENAI, tool_choice="auto")).choices
    with pytest.raises(anthropic.BadRequestError, match="tool_choice"):
        await ask_anthropic(fake_llm, tools=TOOLS_ANTHROPIC, tool_choice={"type": "any"})


def test_unknown_quirk_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown fake LLM quirks"):
        FakeLLM(quirks={"reasoning_echoo"})


async def test_orphan_tool_results_are_rejected(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    orphan = [user("t"), {"role": "tool", "tool_call_id": "call_9_9", "content": "r"}]
    with pytest.raises(openai.BadRequestError, match="matches no tool call"):
        await ask_openai(fake_llm, messages=orphan)
    unanswered = tool_history(None)[:2]
    with pytest.raises(openai.BadRequestError, match="tool"):
        await ask_openai(fake_llm, messages=unanswered)
    result_block = {"type": "tool_result", "tool_use_id": "toolu_9_9", "content": "r"}
    with pytest.raises(anthropic.BadRequestError, match="matches no tool_use"):
        await ask_anthropic(fake_llm, messages=[{"role": "user", "content": [result_block]}])


def test_bad_requests_get_400_and_server_survives(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    cases = [
        ("/v1/chat/completions", b"{not json", "not valid JSON"),
        ("/v1/chat/completions", b"[1, 2]", "JSON object"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}]}', "'model'"),
        ("/v1/chat/completions", b'{"model": "m"}', "'messages'"),
        ("/v1/chat/completions", b'{"model": "m", "messages": ["x"]}', "messages[0]"),
        (
            "/v1/messages",
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}',
            "max_tokens",
        ),
        (
            "/v1/messages",
            b'{"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}',
            "role",
        ),
    ]
    for path, body, needle in cases:
        status, payload = raw_post(fake_llm, path, body)
        assert status == 400, (body, payload)
        assert needle in json.dumps(payload), (body, payload)
    status, payload = raw_post(fake_llm, "/v1/messages", b"{}")
    assert payload["type"] == "error"
    status, payload = raw_post(fake_llm, "/v1/nothing", b"{}")
    assert status == 404
    good = b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}'
    assert raw_post(fake_llm, "/v1/chat/completions", good)[0] == 200


async def test_empty_script_answers_no_scenario_matches(fake_llm: FakeLLM) -> None:
    with pytest.raises(openai.BadRequestError, match="no scenario matches"):
        await ask_openai(fake_llm)


async def test_failing_script_callable_gives_500(fake_llm: FakeLLM) -> None:
    def broken(request: FakeRequest) -> Reply:
        raise RuntimeError("boom")

    fake_llm.set_script(broken)
    with pytest.raises(openai.InternalServerError, match="boom"):
        await ask_openai(fake_llm)


async def test_callable_script(fake_llm: FakeLLM) -> None:
    def echo(request: FakeRequest) -> Reply:
        return Reply(
            text=f"{request.api}:{request.task}:{request.turn}",
            tool_calls=(ReplyToolCall(name="f", arguments={"a": 1}),),
        )

    fake_llm.set_script(echo)
    result = await ask_openai(fake_llm, "hi")
    assert result.choices[0].message.content == "openai:hi:0"
    message = await ask_anthropic(fake_llm, "yo")
    assert message.content[0].text == "anthropic:yo:0"
    assert message.content[1].input == {"a": 1}


# --- server bookkeeping ----------------------------------------------------------------------


async def test_models_list_for_both_sdks(fake_llm: FakeLLM) -> None:
    assert [m.id async for m in oai(fake_llm).models.list()] == ["fake-model"]
    assert [m.id async for m in ant(fake_llm).models.list()] == ["fake-model"]


async def test_requests_are_recorded(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    before = time.monotonic()
    await ask_openai(fake_llm, "remember me")
    [recorded] = fake_llm.requests
    assert recorded.path == "/v1/chat/completions"
    assert recorded.method == "POST"
    assert recorded.headers["authorization"] == "Bearer x"
    assert recorded.body["messages"] == [user("remember me")]
    assert recorded.timestamp >= before
    fake_llm.reset_stats()
    assert fake_llm.requests == []


async def test_concurrent_requests_are_counted(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    fake_llm.latency = 0.3
    client = oai(fake_llm)
    await asyncio.gather(
        *(client.chat.completions.create(model="m", messages=[user(f"t{i}")]) for i in range(5))
    )
    # All five in flight at once is the proof they were served side by side; a bound on
    # the wall time (once 1 s, against 1.5 s in a row) only measured the machine's load.
    assert fake_llm.max_concurrent == 5
    # The client has its replies before the server's handlers have returned: let them end.
    deadline = time.monotonic() + 5
    while fake_llm.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    fake_llm.reset_stats()
    assert fake_llm.max_concurrent == 0


@pytest.mark.parametrize("frontend", FRONTENDS)
async def test_stop_is_prompt_even_with_a_slow_answer_in_flight(frontend: Any) -> None:
    fake = FakeLLM(one_turn(text="ok"), latency=10, frontend=frontend).start()
    pending = asyncio.create_task(ask_openai(fake))
    await asyncio.sleep(0.1)
    started = time.monotonic()
    await asyncio.to_thread(fake.stop)
    # Well before the 10 s answer, however loaded the machine.
    assert time.monotonic() - started < min(stretched_by_load(1.0), 5.0)
    with pytest.raises(openai.APIConnectionError):
        await pending


async def test_set_script_from_file_path(fake_llm: FakeLLM, tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text("scenarios:\n  - turns:\n      - text: from yaml\n")
    fake_llm.set_script(path)
    assert (await ask_openai(fake_llm)).choices[0].message.content == "from yaml"


def test_run_fake_llm_serves_until_sigterm(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text("scenarios:\n  - turns:\n      - text: from the cli\n")
    code = (
        "import sys; from pathlib import Path;"
        "from swarmdeck.testing.fake_llm import run_fake_llm;"
        "run_fake_llm(0, Path(sys.argv[1]))"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline().strip()
            assert line.startswith("fake LLM listening on http://127.0.0.1:")
            port = int(line.rsplit(":", 1)[1])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            body = json.dumps({"model": "m", "messages": [user("x")]})
            conn.request("POST", "/v1/chat/completions", body=body)
            answer = json.loads(conn.getresponse().read())
            conn.close()
            assert answer["choices"][0]["message"]["content"] == "from the cli"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=5) == 0
            assert proc.stdout is not None
            assert proc.stdout.read() == ""
            assert proc.stderr.read() == "fake LLM served 1 requests over 1 connections\n"
        finally:
            if proc.poll() is None:
                proc.kill()


# --- Keep-alive ---------------------------------------------------------------------------


def sdk_client(
    fake: FakeLLM, sdk: str, transport: str
) -> openai.AsyncOpenAI | anthropic.AsyncAnthropic:
    """One real SDK client on the fake server over the given HTTP transport (the aiohttp
    one is what swarmdeck's adapters use)."""
    module: Any = openai if sdk == "openai" else anthropic
    http_client = (
        module.DefaultAioHttpClient()
        if transport == "aiohttp"
        else module.DefaultAsyncHttpxClient(verify=False)
    )
    base_url = fake.openai_base_url if sdk == "openai" else fake.anthropic_base_url
    client = module.AsyncOpenAI if sdk == "openai" else module.AsyncAnthropic
    made = client(base_url=base_url, api_key="x", max_retries=0, http_client=http_client)
    _open_clients.append(made)
    return made


async def exchange(client: Any, sdk: str, stream: bool) -> None:
    """One chat request, read to its end (a streamed one event by event)."""
    if sdk == "openai":
        answer = await client.chat.completions.create(
            model="m", messages=[user("t")], stream=stream, tools=TOOLS_OPENAI
        )
    else:
        answer = await client.messages.create(
            model="m", max_tokens=100, messages=[user("t")], stream=stream, tools=TOOLS_ANTHROPIC
        )
    if stream:
        async for _ in answer:
            pass


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_one_connection_serves_every_request_of_a_client(
    fake_llm: FakeLLM, sdk: str, transport: str
) -> None:
    """HTTP/1.1 keep-alive: streamed answers (chunked), JSON answers and errors
    (Content-Length) all leave the connection open for the next request."""
    client = sdk_client(fake_llm, sdk, transport)
    fake_llm.set_script(
        one_turn(text="reading", tool_calls=[{"name": "read_file", "arguments": {"p": "x"}}])
    )
    for i in range(12):
        await exchange(client, sdk, stream=i % 3 != 0)
    fake_llm.set_script(one_turn(text="x", fault={"status": 429, "retry_after": 0}))
    for _ in range(3):
        with pytest.raises(openai.RateLimitError if sdk == "openai" else anthropic.RateLimitError):
            await exchange(client, sdk, stream=True)
    await client.models.list()
    assert len(fake_llm.requests) == 16
    assert fake_llm.connections_opened == 1


async def test_a_cut_stream_costs_the_client_its_connection(fake_llm: FakeLLM) -> None:
    """The count sees the server hang up: after a cut stream the next request connects anew."""
    client = sdk_client(fake_llm, "openai", "aiohttp")
    fake_llm.set_script(one_turn(text="one two three four", fault={"cut_stream": True}))
    with pytest.raises(openai.APIConnectionError):
        await exchange(client, "openai", stream=True)
    fake_llm.set_script(one_turn(text="whole"))
    await exchange(client, "openai", stream=True)
    await exchange(client, "openai", stream=True)
    assert fake_llm.connections_opened == 2
    fake_llm.reset_stats()
    assert fake_llm.connections_opened == 0


async def test_the_asyncio_front_end_serves_many_clients_from_one_thread() -> None:
    """The point of it: concurrent connections cost no thread each, and keep-alive holds."""
    with FakeLLM(one_turn(text="ok"), latency=0.2, frontend="asyncio") as fake:
        client = sdk_client(fake, "openai", "aiohttp")

        def count() -> int:
            # The client resolves the host name in the loop's executor threads: not ours.
            return sum(not t.name.startswith("asyncio") for t in threading.enumerate())

        threads = count()
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, count())
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        for _ in range(2):
            await asyncio.gather(*(exchange(client, "openai", stream=True) for _ in range(100)))
        watcher.cancel()
        assert fake.max_concurrent == 100
        assert peak == threads
        assert len(fake.requests) == 200
        assert fake.connections_opened == 100
