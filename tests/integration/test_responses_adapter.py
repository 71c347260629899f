"""The `openai-responses` kind through the official SDK (its client, streaming the
Responses route) against the fake server on loopback: the request's items and tools, text, calls and usage
read back, errors streamed after the 200, and the hosted tool search (deferred tools, the
server's items kept and sent back verbatim, the fake's refusals and token counts)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from swarmdeck.errors import ProviderError
from swarmdeck.models import errors
from swarmdeck.models.factory import build_chat_model
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.openai_responses import _add_event, _Assembly, _completion
from swarmdeck.models.pricing import cost_usd
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.retry import TurnCall
from swarmdeck.models.types import Message, ToolSpec, Usage
from swarmdeck.testing import responses_wire
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.prompt_cache import prompt_tokens
from swarmdeck.testing.script import FakeRequest, Fault, Reply, ReplyToolCall
from swarmdeck.views.transcript import tool_searches

# The same tools and conversation as the Anthropic tool search tests: both must pass them.
from tests.integration.test_tool_search import (
    HISTORY,
    LIST_DIR,
    READ_FILE,
    SCHEMA,
    TOOLS,
    search_then_list,
)


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def make_model(fake: FakeLLM, **fields: Any) -> Any:
    config = ProviderConfig(
        key=fields.pop("key", "openai-responses"),
        kind="openai-responses",
        base_url=fake.openai_base_url,
        model=fields.pop("model", "fake-model"),
        needs_key=False,
        **fields,
    )
    return build_chat_model(config, config.model, lambda: "sk-test", ProviderLimiter())


def bodies(fake: FakeLLM) -> list[dict[str, Any]]:
    return [r.body for r in fake.requests if r.path == "/v1/responses"]


# --- a conversation -------------------------------------------------------------------------


async def test_a_tool_call_and_its_result_round_trip_with_usage(fake: FakeLLM) -> None:
    fake.cache.min_tokens = 16  # a short prompt is cached too: the test reads its prefix
    read = ReplyToolCall("read_file", {"path": "a.txt"})
    fake.set_script(
        lambda r: (
            Reply(text="Reading it.", tool_calls=(read,))
            if r.turn == 0
            else Reply(text=f"It says: {r.last_tool_result}")
        )
    )
    model = make_model(fake, model="gpt-4o")
    history = [Message("system", "You are terse."), Message("user", "what is in a.txt?")]
    deltas: list[str] = []
    first = await model.complete(history, [READ_FILE], on_delta=deltas.append)
    assert first.text == "Reading it." and "".join(deltas) == "Reading it." and len(deltas) > 1
    assert first.stop_reason == "tool_calls" and first.blocks == ()
    assert [(c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
        ("read_file", {"path": "a.txt"})
    ]
    history += [
        Message("assistant", first.text, tuple(first.tool_calls)),
        Message("tool", "hello from a.txt", tool_call_id=first.tool_calls[0].id),
    ]
    second = await model.complete(history, [READ_FILE])
    assert second.text == "It says: hello from a.txt" and second.stop_reason == "stop"
    body = bodies(fake)[1]
    assert body["instructions"] == "You are terse." and body["stream"] is True
    assert body["max_output_tokens"] == model.config.output_tokens
    assert body["tools"] == [
        {"type": "function", "name": "read_file", "description": READ_FILE.description,
         "parameters": SCHEMA, "strict": False},
    ]  # fmt: skip
    call_id = first.tool_calls[0].id
    assert body["input"] == [
        {"role": "user", "content": "what is in a.txt?"},
        {"role": "assistant", "content": "Reading it."},
        {"type": "function_call", "call_id": call_id, "name": "read_file",
         "arguments": first.tool_calls[0].arguments},
        {"type": "function_call_output", "call_id": call_id, "output": "hello from a.txt"},
    ]  # fmt: skip
    # Usage: the input count holds the cached tokens on the wire, not in ours; the second
    # turn read the first's whole prompt from the cache.
    whole_first = first.usage.input + first.usage.cache_read
    assert first.usage.cache_read == 0 and whole_first > 0 and first.usage.output > 0
    assert second.usage.cache_read >= whole_first and second.usage.input > 0
    assert second.cost_usd == pytest.approx(cost_usd("openai", "gpt-4o", second.usage))


async def test_usage_is_mapped_and_priced_as_openai_s(fake: FakeLLM) -> None:
    usage = {"input": 1000, "output": 300, "reasoning": 120, "cache_read": 400}
    fake.set_script({"scenarios": [{"turns": [{"text": "ok", "usage": usage}]}]})
    completion = await make_model(fake, model="gpt-4o").complete([Message("user", "hi")], [])
    expected = Usage(input=600, output=300, reasoning=120, cache_read=400)
    assert completion.usage == expected
    assert completion.cost_usd and completion.cost_usd == pytest.approx(
        cost_usd("openai", "gpt-4o", expected)
    )


async def test_reasoning_summaries_are_collected(fake: FakeLLM) -> None:
    fake.set_script(lambda _r: Reply(text="42", reasoning="six times seven"))
    completion = await make_model(fake).complete([Message("user", "?")], [])
    assert (completion.text, completion.reasoning) == ("42", "six times seven")


@pytest.mark.parametrize(
    ("event", "kind", "retryable"),
    [
        ({"type": "response.failed", "response": {"status": "failed", "error": {
            "code": "rate_limit_exceeded", "message": "slow down"}}}, errors.RATE_LIMITED, True),
        ({"type": "error", "code": "context_length_exceeded",
          "message": "Your input exceeds the context window"}, errors.CONTEXT_OVERFLOW, False),
        ({"type": "error", "code": "server_error", "message": "oops"}, errors.TEMPORARY, True),
    ],
    ids=["failed-rate-limit", "error-context", "error-server"],
)  # fmt: skip
async def test_an_error_streamed_after_the_200_is_classified_by_its_code(
    event: dict[str, Any], kind: str, retryable: bool
) -> None:
    with pytest.raises(ProviderError) as info:
        await _add_event(_Assembly(), event, TurnCall([], []), "openai-responses")
    assert (info.value.kind, info.value.retryable) == (kind, retryable)


async def test_an_answer_cut_at_max_output_tokens_stops_for_length() -> None:
    acc = _Assembly()
    item = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
    events = [
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_text.delta", "output_index": 0, "delta": "Half an"},
        {"type": "response.incomplete", "response": {
            "status": "incomplete", "model": "m", "incomplete_details": {
                "reason": "max_output_tokens"}, "usage": {"input_tokens": 9, "output_tokens": 2}}},
    ]  # fmt: skip
    for event in events:
        await _add_event(acc, event, TurnCall([], []), "p")
    completion = _completion(acc, "m")
    assert (completion.text, completion.stop_reason) == ("Half an", "length")
    assert (completion.usage.input, completion.usage.output) == (9, 2)


# --- the hosted tool search -----------------------------------------------------------------


@pytest.mark.parametrize("whole", [False, True], ids=["streamed", "whole"])
async def test_deferred_tools_are_found_and_the_items_go_back_verbatim(
    fake: FakeLLM, whole: bool
) -> None:
    fake.cache.min_tokens = 16
    fault = Fault(ignore_stream=True) if whole else None
    fake.set_script(lambda r: Reply(**{**search_then_list(r).__dict__, "fault": fault}))
    model = make_model(fake)
    first = await model.complete(HISTORY, TOOLS)
    tools = bodies(fake)[0]["tools"]
    assert [(t.get("name"), t["type"], t.get("defer_loading", False)) for t in tools] == [
        ("read_file", "function", False),
        (None, "tool_search", False),
        ("swarmdeck__tools", "namespace", False),  # swarmdeck's own deferred tools
    ]
    assert [(t["name"], t["defer_loading"]) for t in tools[2]["tools"]] == [
        ("list_dir", True),
        ("spawn_agent", True),
    ]
    kinds = [item["type"] for item in first.blocks]
    assert kinds == ["tool_search_call", "tool_search_output", "message", "function_call"]
    assert first.blocks[0]["arguments"] == {"query": "directory listing"}
    assert first.blocks[0]["execution"] == "server"
    [space] = first.blocks[1]["tools"]
    assert [t["name"] for t in space["tools"]] == ["list_dir"]
    assert first.blocks[3]["namespace"] == "swarmdeck__tools"
    assert first.blocks[0]["call_id"] == first.blocks[1]["call_id"]
    assert [c.name for c in first.tool_calls] == ["list_dir"] and first.text == "Looking."
    assert first.tool_calls[0].id == first.blocks[3]["call_id"]
    assert tool_searches(list(first.blocks)) == ["tool search('directory listing') → list_dir"]
    stored = copy.deepcopy(first.blocks)
    history = [
        *HISTORY,
        Message("assistant", first.text, tuple(first.tool_calls), blocks=first.blocks),
        Message("tool", "README.md", tool_call_id=first.tool_calls[0].id),
    ]
    second = await model.complete(history, TOOLS)
    assert second.text == "done" and second.blocks == ()
    sent = bodies(fake)[1]
    assert sent["input"][1:5] == list(stored) and first.blocks == stored
    assert sent["input"][5]["type"] == "function_call_output"
    assert sent["tools"] == tools  # the tools list never changes
    whole_first = first.usage.input + first.usage.cache_read
    assert second.usage.cache_read >= whole_first  # so the cached prefix held


async def test_off_sends_no_deferred_tool_and_no_search(fake: FakeLLM) -> None:
    fake.set_script(lambda _r: Reply(text="ok"))
    await make_model(fake, tool_search="off").complete(HISTORY, TOOLS)
    assert [t["name"] for t in bodies(fake)[0]["tools"]] == ["read_file"]
    # Without deferred tools there is nothing to search: no search tool either.
    await make_model(fake).complete(HISTORY, [READ_FILE])
    assert [t["type"] for t in bodies(fake)[1]["tools"]] == ["function"]


def test_the_hosted_search_is_the_responses_kind_s_and_on_by_default() -> None:
    base = {"key": "p", "base_url": "http://127.0.0.1:9", "model": "m"}
    assert ProviderConfig(kind="openai-responses", **base).vendor_tool_search == "hosted"
    off = ProviderConfig(kind="openai-responses", tool_search="off", **base)
    assert off.vendor_tool_search is None
    with pytest.raises(ValidationError, match="one of: hosted, off"):
        ProviderConfig(kind="openai-responses", tool_search="bm25", **base)
    with pytest.raises(ValidationError, match="one of: bm25, regex, off"):
        ProviderConfig(kind="anthropic", tool_search="hosted", **base)
    with pytest.raises(ValidationError, match="use kind openai-responses"):
        ProviderConfig(kind="openai", tool_search="hosted", **base)


async def test_a_deferred_tool_no_search_returned_is_refused(fake: FakeLLM) -> None:
    fake.set_script(lambda _r: Reply(tool_calls=(ReplyToolCall("list_dir", {"path": "."}),)))
    with pytest.raises(ProviderError) as info:
        await make_model(fake).complete(HISTORY, TOOLS)
    assert info.value.status == 400 and not info.value.retryable
    assert "'list_dir' is deferred (defer_loading: true) and no tool search" in info.value.message


def _function(name: str, deferred: bool = False) -> dict[str, Any]:
    tool = {
        "type": "function",
        "name": name,
        "description": "d " * 20,
        "parameters": {
            "type": "object",
            "properties": {"x": {"type": "string", "description": "w " * 200}},
        },
    }
    return {**tool, "defer_loading": True} if deferred else tool  # fmt: skip


def _weight(tools: list[dict[str, Any]], *items: dict[str, Any]) -> int:
    body = {"model": "m", "input": [{"role": "user", "content": "hi"}, *items], "tools": tools}
    return prompt_tokens("openai", responses_wire.validate(body, frozenset()).body)


def test_deferred_tools_weigh_their_names_until_a_search_loads_them() -> None:
    search = {"type": "tool_search"}
    lean = _weight([_function("shown"), search])
    deferred = _weight([_function("shown"), search, _function("a", True), _function("b", True)])
    shown = _weight([_function("shown"), search, _function("a"), _function("b")])
    assert lean < deferred < lean + 30 < shown
    found = [
        {"type": "tool_search_call", "call_id": "ts", "execution": "server", "arguments": {}},
        {"type": "tool_search_output", "call_id": "ts", "execution": "server",
         "tools": [_function("a")]},
    ]  # fmt: skip
    after = _weight([_function("shown"), search, _function("a", True), _function("b", True)],
                    *found)  # fmt: skip
    # The schema a search loaded weighs where its output stands: one schema, not two.
    assert 100 < after - deferred < 200
    request = responses_wire.validate(
        {"model": "m", "input": [{"role": "user", "content": "hi"}, *found],
         "tools": [_function("shown"), search, _function("a", True)]}, frozenset()
    )  # fmt: skip
    assert request.tool_search == "hosted" and request.found_tools == ["a"]
    assert request.turn == 1


ISSUE = ToolSpec(
    "tracker__create_issue", "Create an issue in the tracker.", SCHEMA, deferred=True,
    group="tracker",
)  # fmt: skip


def search_then_file(request: FakeRequest) -> Reply:
    """Turn 0 searches (no call), turn 1 calls what it found, turn 2 ends."""
    if request.turn == 0:
        return Reply(text="Searching.", tool_search="tracker create issue")
    if request.turn == 1:
        return Reply(tool_calls=(ReplyToolCall("tracker__create_issue", {"path": "x"}),))
    return Reply(text="filed")


async def test_a_group_s_deferred_tools_are_one_namespace_its_calls_keep_it(fake: FakeLLM) -> None:
    fake.set_script(search_then_file)
    model = make_model(fake)
    tools = [*TOOLS, ISSUE]
    first = await model.complete(HISTORY, tools)
    space = bodies(fake)[0]["tools"][-1]
    assert (space["type"], space["name"]) == ("namespace", "tracker")
    assert space["description"].startswith("The MCP server tracker's 1 tool (tracker__create")
    assert [(t["name"], t["defer_loading"]) for t in space["tools"]] == [
        ("tracker__create_issue", True)
    ]
    loaded = first.blocks[1]["tools"]
    assert [(t["type"], t["name"]) for t in loaded] == [("namespace", "tracker")]
    history = [*HISTORY, Message("assistant", first.text, blocks=first.blocks),
               Message("user", "file it")]  # fmt: skip
    second = await model.complete(history, tools)
    # No search in this turn, but the call names its namespace: the items are kept.
    assert [c.name for c in second.tool_calls] == ["tracker__create_issue"]
    assert [i["type"] for i in second.blocks] == ["function_call"]
    assert second.blocks[0]["namespace"] == "tracker"
    history += [
        Message("assistant", "", tuple(second.tool_calls), blocks=second.blocks),
        Message("tool", "filed #1", tool_call_id=second.tool_calls[0].id),
    ]
    assert (await model.complete(history, tools)).text == "filed"
    sent = [i for i in bodies(fake)[2]["input"] if i.get("type") == "function_call"]
    assert [(i["name"], i["namespace"]) for i in sent] == [("tracker__create_issue", "tracker")]


def test_what_the_meter_counts_of_deferred_tools_depends_on_the_vendor() -> None:
    from swarmdeck.models.estimate import tools_text

    assert tools_text([LIST_DIR, ISSUE], "anthropic") == ""
    seen = tools_text([LIST_DIR, ISSUE], "openai-responses")
    # Each deferred tool is in a namespace, of which the model reads the name and
    # description: swarmdeck's own point to the index, an MCP server's name its tools.
    assert seen.startswith("swarmdeck__toolsswarmdeck's own tools") and "list_dir" not in seen
    assert "MCP server tracker" in seen and "create_issue" in seen
    assert "path" not in seen  # no schema
