"""Script logic of the fake LLM: turn selection, matching, placeholders, faults, defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.testing.script import (
    EXHAUSTED_TEXT,
    TOOL_RESULT_PLACEHOLDER_CHARS,
    FakeRequest,
    Fault,
    FaultCounter,
    NoScenarioMatches,
    Reply,
    ReplyToolCall,
    ReplyUsage,
    Script,
    ScriptError,
    as_script_fn,
    break_json,
    effective_usage,
)


def openai_request(*messages: dict[str, Any], model: str = "m") -> FakeRequest:
    """A Chat Completions request with these messages."""
    return FakeRequest.from_body("openai", {"model": model, "messages": list(messages)})


def anthropic_request(*messages: dict[str, Any], system: Any = None) -> FakeRequest:
    """A Messages request with these messages."""
    body: dict[str, Any] = {"model": "m", "max_tokens": 10, "messages": list(messages)}
    if system is not None:
        body["system"] = system
    return FakeRequest.from_body("anthropic", body)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant_call(call_id: str = "call_0_0") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }


def tool(content: str, call_id: str = "call_0_0") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


TWO_TURNS = Script.from_dict(
    {
        "scenarios": [
            {
                "turns": [
                    {
                        "text": "first",
                        "tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}],
                    },
                    {"text": "second"},
                ]
            }
        ]
    }
)


# --- request parsing -------------------------------------------------------------------


def test_turn_is_number_of_assistant_messages() -> None:
    assert openai_request(user("t")).turn == 0
    assert openai_request(user("t"), assistant_call(), tool("r")).turn == 1
    request = anthropic_request(user("t"), {"role": "assistant", "content": "a"}, user("u"))
    assert request.turn == 1


def test_task_is_first_user_message_text_in_both_shapes() -> None:
    system = {"role": "system", "content": "be brief"}
    assert openai_request(system, user("fix the bug"), user("later")).task == "fix the bug"
    parts = [{"type": "text", "text": "fix "}, {"type": "text", "text": "it"}]
    assert openai_request({"role": "user", "content": parts}).task == "fix it"
    blocks = [{"type": "text", "text": "anthropic task"}]
    assert anthropic_request({"role": "user", "content": blocks}).task == "anthropic task"


def test_last_tool_result_openai_and_anthropic() -> None:
    request = openai_request(
        user("t"), assistant_call("a"), tool("one", "a"), assistant_call("b"), tool("two", "b")
    )
    assert request.last_tool_result == "two"
    use = {"type": "tool_use", "id": "toolu_0_0", "name": "f", "input": {}}
    result_list = {
        "type": "tool_result",
        "tool_use_id": "toolu_0_0",
        "content": [{"type": "text", "text": "from "}, {"type": "text", "text": "blocks"}],
    }
    request = anthropic_request(
        user("t"),
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result_list]},
    )
    assert request.last_tool_result == "from blocks"
    result_str = {"type": "tool_result", "tool_use_id": "toolu_0_0", "content": "plain"}
    request = anthropic_request(
        user("t"),
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result_str]},
    )
    assert request.last_tool_result == "plain"
    assert anthropic_request(user("t")).last_tool_result == ""


def test_conversation_key_is_stable_and_content_sensitive() -> None:
    assert openai_request(user("a")).conversation_key == openai_request(user("a")).conversation_key
    assert openai_request(user("a")).conversation_key != openai_request(user("b")).conversation_key


# --- choosing replies --------------------------------------------------------------------


def test_turns_follow_the_assistant_count_then_exhaust() -> None:
    assert TWO_TURNS.reply_for(openai_request(user("t"))).text == "first"
    reply = TWO_TURNS.reply_for(openai_request(user("t"), assistant_call(), tool("r")))
    assert reply.text == "second"
    assert reply.tool_calls == ()
    history = [user("t"), assistant_call(), tool("r"), {"role": "assistant", "content": "x"}]
    exhausted = TWO_TURNS.reply_for(openai_request(*history, user("more")))
    assert exhausted == Reply(text=EXHAUSTED_TEXT)


def test_first_matching_scenario_wins_and_fallback_is_last_unmatched() -> None:
    script = Script.from_dict(
        {
            "scenarios": [
                {"turns": [{"text": "early default"}]},
                {"match": "deploy", "turns": [{"text": "deploying"}]},
                {"match": "deploy to prod", "turns": [{"text": "never chosen"}]},
                {"turns": [{"text": "late default"}]},
            ]
        }
    )
    assert script.reply_for(openai_request(user("please deploy to prod"))).text == "deploying"
    assert script.reply_for(openai_request(user("something else"))).text == "late default"


def test_no_match_without_fallback_raises() -> None:
    script = Script.from_dict({"scenarios": [{"match": "x", "turns": [{"text": "y"}]}]})
    with pytest.raises(NoScenarioMatches, match="no scenario matches"):
        script.reply_for(openai_request(user("abc")))
    with pytest.raises(NoScenarioMatches):
        Script().reply_for(openai_request(user("abc")))


def test_placeholders_in_text_reasoning_and_object_arguments() -> None:
    script = Script.from_dict(
        {
            "scenarios": [
                {
                    "turns": [
                        {"text": "go"},
                        {
                            "text": "Done: {{last_tool_result}} at {{turn}} for {{task}}",
                            "reasoning": "turn {{turn}}",
                            "tool_calls": [
                                {"name": "a", "arguments": {"q": "{{task}}", "n": [1, "{{turn}}"]}},
                                {"name": "b", "arguments": '{"raw": "{{task}}"}'},
                            ],
                        },
                    ]
                }
            ]
        }
    )
    cap = TOOL_RESULT_PLACEHOLDER_CHARS
    long_result = "x" * (cap + 200)
    reply = script.reply_for(openai_request(user("the task"), assistant_call(), tool(long_result)))
    assert reply.text == f"Done: {'x' * cap} at 1 for the task"
    assert reply.reasoning == "turn 1"
    assert json.loads(reply.tool_calls[0].arguments_text()) == {"q": "the task", "n": [1, "1"]}
    # Raw string arguments are sent as is, placeholders included.
    assert reply.tool_calls[1].arguments_text() == '{"raw": "{{task}}"}'


def test_turn_fields_are_copied_to_the_reply() -> None:
    script = Script.from_dict(
        {
            "scenarios": [
                {
                    "turns": [
                        {
                            "text": "t",
                            "delay": 0.5,
                            "usage": {"input": 100, "output": 20, "cache_read": 10},
                            "fault": {"status": 429, "retry_after": 2, "times": 2},
                        }
                    ]
                }
            ]
        }
    )
    reply = script.reply_for(openai_request(user("x")))
    assert reply.delay == 0.5
    assert reply.usage == ReplyUsage(input=100, output=20, cache_read=10)
    assert reply.fault == Fault(status=429, retry_after=2, times=2)


# --- fault counter -------------------------------------------------------------------------


def test_times_counter_is_per_conversation_and_turn() -> None:
    counter = FaultCounter()
    fault = Fault(status=429, times=2)
    first = openai_request(user("a"))
    other = openai_request(user("b"))
    assert [counter.fires(fault, first) for _ in range(3)] == [True, True, False]
    assert counter.fires(fault, other) is True
    counter.reset()
    assert counter.fires(fault, first) is True


def test_fault_without_times_always_fires() -> None:
    counter = FaultCounter()
    request = openai_request(user("a"))
    assert all(counter.fires(Fault(status=500), request) for _ in range(5))


# --- defaults --------------------------------------------------------------------------


def test_default_usage_is_derived_from_text_lengths() -> None:
    request = openai_request(user("x" * 40))
    usage = effective_usage(Reply(text="y" * 20), request)
    assert usage == ReplyUsage(input=10, output=5)
    tiny = effective_usage(Reply(text=""), openai_request(user("")))
    assert (tiny.input, tiny.output) == (1, 1)
    call = ReplyToolCall(name="abcd", arguments="{}" * 6)
    assert effective_usage(Reply(tool_calls=(call,)), request).output == 4


def test_default_usage_counts_reasoning_in_output() -> None:
    usage = effective_usage(Reply(text="y" * 20, reasoning="r" * 40), openai_request(user("x")))
    assert usage.reasoning == 10
    assert usage.output == 15


def test_partial_usage_keeps_given_counts_and_derives_the_rest() -> None:
    reply = Reply(text="y" * 20, usage=ReplyUsage(input=100, cache_read=7))
    usage = effective_usage(reply, openai_request(user("x")))
    assert usage == ReplyUsage(input=100, output=5, cache_read=7)


def test_anthropic_input_count_includes_system() -> None:
    request = anthropic_request(user("x" * 8), system="s" * 8)
    assert effective_usage(Reply(text="a"), request).input == 4


def test_break_json_never_parses() -> None:
    for text in ['{"path": "README.md"}', "{}", "", "1", "[1]"]:
        with pytest.raises(ValueError):
            json.loads(break_json(text))


# --- loading ----------------------------------------------------------------------------


def test_load_yaml_and_json(tmp_path: Path) -> None:
    yaml_path = tmp_path / "s.yaml"
    yaml_path.write_text(
        "scenarios:\n"
        "  - match: hello\n"
        "    turns:\n"
        "      - text: hi\n"
        "        tool_calls:\n"
        "          - name: read_file\n"
        "            arguments: {path: README.md}\n"
    )
    reply = Script.load(yaml_path).reply_for(openai_request(user("hello there")))
    assert reply.text == "hi"
    assert json.loads(reply.tool_calls[0].arguments_text()) == {"path": "README.md"}
    json_path = tmp_path / "s.json"
    json_path.write_text(json.dumps({"scenarios": [{"turns": [{"text": "from json"}]}]}))
    assert Script.load(json_path).reply_for(openai_request(user("x"))).text == "from json"


@pytest.mark.parametrize(
    "data",
    [
        {"scenarios": [{"turns": [{"txt": "typo"}]}]},
        {"scenarios": [{"turns": [{"tool_calls": [{"arguments": {}}]}]}]},
        {"scenarios": [{"turns": [{"fault": {"status": 200}}]}]},
        {"scenarios": "nope"},
    ],
)
def test_invalid_scripts_are_rejected(data: dict[str, Any]) -> None:
    with pytest.raises(ScriptError):
        Script.from_dict(data)


def test_unreadable_script_files_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ScriptError):
        Script.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ScriptError):
        Script.load(bad)


def test_as_script_fn_accepts_every_source(tmp_path: Path) -> None:
    request = openai_request(user("x"))
    data = {"scenarios": [{"turns": [{"text": "ok"}]}]}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))

    def fn(req: FakeRequest) -> Reply:
        return Reply(text=f"called with {req.task}")

    assert as_script_fn(data)(request).text == "ok"
    assert as_script_fn(path)(request).text == "ok"
    assert as_script_fn(str(path))(request).text == "ok"
    assert as_script_fn(fn)(request).text == "called with x"
    with pytest.raises(NoScenarioMatches):
        as_script_fn(None)(request)
    with pytest.raises(TypeError):
        as_script_fn(42)  # type: ignore[arg-type]
