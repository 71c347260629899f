"""The fake LLM's OpenAI Responses API (`/v1/responses`), driven by the real openai SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from swarmdeck.testing.fake_llm import FakeLLM

SHELL_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "exec_command",
    "description": "Runs a shell command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}
TWO_TURNS: dict[str, Any] = {
    "scenarios": [
        {
            "turns": [
                {
                    "text": "Listing.",
                    "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "ls"}}],
                },
                {"text": "Done: {{last_tool_result}}"},
            ]
        }
    ]
}


@pytest.fixture(params=["threads", "asyncio"])
def fake_llm(request: pytest.FixtureRequest) -> Iterator[FakeLLM]:
    """The fake server on each of its front ends: they must answer alike."""
    with FakeLLM(frontend=request.param) as server:
        yield server


@pytest.fixture
def client(fake_llm: FakeLLM) -> Iterator[openai.OpenAI]:
    """The official sync client on the fake server, with no retries of its own."""
    with openai.OpenAI(base_url=fake_llm.openai_base_url, api_key="sk-fake", max_retries=0) as made:
        yield made


def one_turn(**turn: Any) -> dict[str, Any]:
    """A script with a single scenario of a single turn."""
    return {"scenarios": [{"turns": [turn]}]}


def test_a_text_reply_is_a_response_with_a_message_and_usage(
    fake_llm: FakeLLM, client: openai.OpenAI
) -> None:
    fake_llm.set_script(one_turn(text="Hello there", usage={"input": 12, "output": 3}))
    result = client.responses.create(model="m", instructions="Be brief.", input="Say hi")
    assert result.object == "response" and result.status == "completed"
    assert result.id.startswith("resp_")
    assert result.output_text == "Hello there"
    assert [item.type for item in result.output] == ["message"]
    assert result.output[0].content[0].type == "output_text"
    assert result.usage is not None
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (12, 3, 15)
    assert usage.input_tokens_details.cached_tokens == 0
    assert result.instructions == "Be brief."


def test_a_streamed_reply_comes_as_the_typed_events_in_order(
    fake_llm: FakeLLM, client: openai.OpenAI
) -> None:
    fake_llm.set_script(one_turn(text="one two three", usage={"input": 7, "output": 2}))
    events = list(client.responses.create(model="m", input="count", stream=True))
    kinds = [event.type for event in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "one two three"
    assert events[0].response.status == "in_progress" and events[0].response.usage is None
    completed = events[-1].response
    assert completed.output_text == "one two three"
    assert completed.usage is not None and completed.usage.total_tokens == 9


def test_the_stream_helper_reassembles_a_function_call(
    fake_llm: FakeLLM, client: openai.OpenAI
) -> None:
    fake_llm.set_script(TWO_TURNS)
    with client.responses.stream(model="m", input="list files", tools=[SHELL_TOOL]) as stream:
        pieces = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert len(pieces) > 1
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.name, c.arguments, c.call_id) for c in calls] == [
        ("exec_command", '{"cmd": "ls"}', "call_0_0")
    ]
    assert final.output_text == "Listing."


def test_a_function_call_output_round_trip_reaches_the_script(
    fake_llm: FakeLLM, client: openai.OpenAI
) -> None:
    fake_llm.set_script(TWO_TURNS)
    first = client.responses.create(model="m", input="list files", tools=[SHELL_TOOL])
    call = next(item for item in first.output if item.type == "function_call")
    history: list[Any] = [{"role": "user", "content": "list files"}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"})
    second = client.responses.create(
        model="m", instructions="Use the shell.", input=history, tools=[SHELL_TOOL]
    )
    assert second.output_text == "Done: a.txt"
    sent = fake_llm.requests[-1]
    assert sent.path == "/v1/responses"
    assert sent.body["instructions"] == "Use the shell."
    assert sent.body["tools"][0]["name"] == "exec_command"
    assert [item.get("type", "message") for item in sent.body["input"]] == [
        "message",
        "message",
        "function_call",
        "function_call_output",
    ]


def test_a_custom_tool_is_called_with_its_raw_input(
    fake_llm: FakeLLM, client: openai.OpenAI
) -> None:
    patch = "*** Begin Patch\n*** End Patch"
    fake_llm.set_script(one_turn(tool_calls=[{"name": "apply_patch", "arguments": patch}]))
    tool: Any = {"type": "custom", "name": "apply_patch", "description": "Edit files."}
    events = list(client.responses.create(model="m", input="edit", tools=[tool], stream=True))
    deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
    assert "".join(deltas) == patch
    item = events[-1].response.output[-1]
    assert (item.type, item.name, item.input) == ("custom_tool_call", "apply_patch", patch)


def test_reasoning_comes_as_a_summary_item_before_the_message(
    fake_llm: FakeLLM, client: openai.OpenAI
) -> None:
    fake_llm.set_script(one_turn(text="42", reasoning="Six times seven."))
    result = client.responses.create(model="m", input="answer")
    assert [item.type for item in result.output] == ["reasoning", "message"]
    assert result.output[0].summary[0].text == "Six times seven."
    assert result.usage is not None and result.usage.output_tokens_details.reasoning_tokens > 0


def test_a_repeated_long_prefix_is_reported_as_cached_tokens(
    fake_llm: FakeLLM, client: openai.OpenAI
) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    instructions = "x" * 10_000
    first = client.responses.create(model="m", instructions=instructions, input="first")
    second = client.responses.create(model="m", instructions=instructions, input="second")
    assert first.usage is not None and second.usage is not None
    assert first.usage.input_tokens_details.cached_tokens == 0
    assert second.usage.input_tokens_details.cached_tokens == 2500
    assert second.usage.input_tokens > 2500


def test_a_scripted_429_has_retry_after_and_openai_error_shape(
    fake_llm: FakeLLM, client: openai.OpenAI
) -> None:
    fake_llm.set_script(one_turn(text="x", fault={"status": 429, "retry_after": 2}))
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="m", input="hi", stream=True)
    assert caught.value.response.headers["retry-after"] == "2"
    assert caught.value.code == "rate_limit_exceeded"


def test_a_cut_stream_raises_in_the_client(fake_llm: FakeLLM, client: openai.OpenAI) -> None:
    fake_llm.set_script(one_turn(text="one two three four", fault={"cut_stream": True}))
    with pytest.raises(openai.APIConnectionError):
        for _ in client.responses.create(model="m", input="hi", stream=True):
            pass


def test_an_output_for_no_call_is_a_400(fake_llm: FakeLLM, client: openai.OpenAI) -> None:
    fake_llm.set_script(one_turn(text="x"))
    orphan = {"type": "function_call_output", "call_id": "call_9", "output": "?"}
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input=[{"role": "user", "content": "hi"}, orphan])
    assert "call_9" in caught.value.message
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="m", input=[])
    assert client.responses.create(model="m", input="still up").output_text == "x"


def test_a_scenario_matches_a_task_sent_after_other_user_items(
    fake_llm: FakeLLM, client: openai.OpenAI
) -> None:
    # Codex sends its <environment_context> as a user item of its own before the task.
    fake_llm.set_script(
        {
            "scenarios": [
                {"match": "fix the bug", "turns": [{"text": "fixing"}]},
                {"turns": [{"text": "no match"}]},
            ]
        }
    )
    context = {"role": "user", "content": [{"type": "input_text", "text": "<env/>"}]}
    task = {"role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]}
    assert client.responses.create(model="m", input=[context, task]).output_text == "fixing"
    assert client.responses.create(model="m", input=[context]).output_text == "no match"


def test_stream_faults_apply_to_responses(fake_llm: FakeLLM, client: openai.OpenAI) -> None:
    fake_llm.set_script(one_turn(text="plain", fault={"omit_usage": True}))
    events = list(client.responses.create(model="m", input="a", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.usage is None
    fake_llm.set_script(one_turn(text="whole", fault={"empty_stream": True}))
    assert list(client.responses.create(model="m", input="b", stream=True)) == []
    fake_llm.set_script(one_turn(text="whole", fault={"ignore_stream": True}))
    raw = client.responses.with_raw_response.create(model="m", input="c", stream=True)
    assert raw.headers["content-type"] == "application/json"
    assert json.loads(raw.http_response.read())["output"][0]["content"][0]["text"] == "whole"


def test_a_prompt_over_the_window_is_context_length_exceeded(
    fake_llm: FakeLLM, client: openai.OpenAI
) -> None:
    fake_llm.set_script({"context_tokens": 1000, "scenarios": [{"turns": [{"text": "ok"}]}]})
    assert client.responses.create(model="m", input="short").output_text == "ok"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input="short", max_output_tokens=2000)
    assert caught.value.code == "context_length_exceeded"
