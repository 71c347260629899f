"""The fake LLM server's failures as the real openai and anthropic SDK clients meet them:
scripted faults (rate limits with Retry-After in both vendors' shapes, status errors, cut
streams, malformed tool arguments, delays), vendors' quirks, and the requests it refuses
with a 400 (bad JSON, missing fields, orphan tool results) while it keeps serving; also
scripts that are Python callables, failing or not.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from tests.integration.test_fake_llm_sdk_support import (
    TOOLS_ANTHROPIC,
    TOOLS_OPENAI,
    _close_clients,  # noqa: F401  (autouse)
    ant,
    ask_anthropic,
    ask_openai,
    fake_llm_on_each_front_end,  # noqa: F401  (the `fake_llm` fixture)
    oai,
    one_turn,
    user,
)


def raw_post(fake: FakeLLM, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST raw bytes, for requests the SDKs would refuse to send."""
    conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


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
