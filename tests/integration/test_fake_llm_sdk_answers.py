"""The fake LLM server's answers as the real openai and anthropic SDK clients read them:
plain and streamed text with its usage, reasoning, tool calls (streamed ones sent in pieces
and put together again by the SDKs' stream helpers), and conversations whose next turn
uses the last tool result.
"""

from __future__ import annotations

import json
from typing import Any

from swarmdeck.testing.fake_llm import FakeLLM
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
