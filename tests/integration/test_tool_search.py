"""Anthropic's tool search through the real SDK against the fake server: deferred tools and
the search tool in the request, the server's blocks read from the stream (or a whole
answer) and sent back verbatim; a turn the server paused, sent back to go on; the fake's
search, its refusals and its token counts."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from swarmdeck.errors import ProviderError
from swarmdeck.models.factory import build_chat_model
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.types import Message, ToolSpec
from swarmdeck.testing import anthropic_wire
from swarmdeck.testing.answer import HttpError
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.prompt_cache import prompt_tokens
from swarmdeck.testing.reply import ReplyUsage
from swarmdeck.testing.script import FakeRequest, Fault, Reply, ReplyToolCall, Script

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
READ_FILE = ToolSpec("read_file", "Read a file of the workdir.", SCHEMA)
LIST_DIR = ToolSpec("list_dir", "List a directory of the workdir.", SCHEMA, deferred=True)
SPAWN = ToolSpec("spawn_agent", "Start a sub-agent on a task.", SCHEMA, deferred=True)
TOOLS = [READ_FILE, LIST_DIR, SPAWN]
HISTORY = [Message("system", "You are terse."), Message("user", "what is in the workdir?")]


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def make_model(fake: FakeLLM, kind: str = "anthropic", **fields: Any) -> Any:
    config = ProviderConfig(
        key="fake",
        kind=kind,  # type: ignore[arg-type]
        base_url=fake.anthropic_base_url if kind == "anthropic" else fake.openai_base_url,
        model="fake-model",
        needs_key=False,
        **fields,
    )
    return build_chat_model(config, config.model, lambda: "sk-test", ProviderLimiter())


def bodies(fake: FakeLLM) -> list[dict[str, Any]]:
    return [r.body for r in fake.requests if r.path == "/v1/messages"]


def unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def search_then_list(request: FakeRequest) -> Reply:
    if request.turn == 0:
        call = ReplyToolCall("list_dir", {"path": "."})
        return Reply(text="Looking.", tool_search="directory listing", tool_calls=(call,))
    return Reply(text="done")


@pytest.mark.parametrize("whole", [False, True], ids=["streamed", "whole"])
async def test_deferred_tools_are_found_and_the_search_goes_back_verbatim(
    fake: FakeLLM, whole: bool
) -> None:
    fault = Fault(ignore_stream=True) if whole else None
    fake.set_script(lambda r: Reply(**{**search_then_list(r).__dict__, "fault": fault}))
    model = make_model(fake)
    first = await model.complete(HISTORY, TOOLS)
    tools = bodies(fake)[0]["tools"]
    assert [(t["name"], t.get("defer_loading", False)) for t in tools] == [
        ("read_file", False),
        ("tool_search_tool_bm25", False),
        ("list_dir", True),
        ("spawn_agent", True),
    ]
    assert tools[1]["type"] == "tool_search_tool_bm25_20251119"
    assert [t for t in tools if "cache_control" in t] == [tools[1]]  # the last one shown
    assert [b["type"] for b in first.blocks] == [
        "server_tool_use",
        "tool_search_tool_result",
        "text",
        "tool_use",
    ]
    assert first.blocks[0]["input"] == {"query": "directory listing"}
    refs = first.blocks[1]["content"]["tool_references"]
    assert refs[0] == {"type": "tool_reference", "tool_name": "list_dir"}
    assert [c.name for c in first.tool_calls] == ["list_dir"] and first.text == "Looking."
    stored = copy.deepcopy(first.blocks)
    history = [
        *HISTORY,
        Message("assistant", first.text, tuple(first.tool_calls), blocks=first.blocks),
        Message("tool", "README.md", tool_call_id=first.tool_calls[0].id),
    ]
    second = await model.complete(history, TOOLS)
    assert second.text == "done"
    sent = bodies(fake)[1]
    assert sent["messages"][1] == {"role": "assistant", "content": list(stored)}
    assert first.blocks == stored  # the request's cache breakpoint did not mark the turn
    assert unmarked(sent["tools"]) == unmarked(tools)  # the tools block never changes


def pause_then_list(request: FakeRequest) -> Reply:
    """The server pauses after its search; sent back, the turn goes on and calls list_dir."""
    if request.body["messages"][-1]["role"] == "user":
        used = ReplyUsage(input=100, output=10)
        return Reply(
            text="Searching.", tool_search="directory listing", pause_turn=True, usage=used
        )
    call = ReplyToolCall("list_dir", {"path": "."})
    return Reply(text=" Found it.", tool_calls=(call,), usage=ReplyUsage(input=150, output=5))


@pytest.mark.parametrize("whole", [False, True], ids=["streamed", "whole"])
async def test_a_paused_turn_is_sent_back_and_comes_back_whole(fake: FakeLLM, whole: bool) -> None:
    fault = Fault(ignore_stream=True) if whole else None
    fake.set_script(lambda r: Reply(**{**pause_then_list(r).__dict__, "fault": fault}))
    model = make_model(fake)
    turn = await model.complete(HISTORY, TOOLS)
    asked, went_on = bodies(fake)
    # The paused turn went back as the server wrote it, with no message of ours after it.
    assert unmarked(went_on["messages"][:-1]) == unmarked(asked["messages"])
    paused = unmarked(went_on["messages"][-1])
    assert paused["role"] == "assistant"
    assert [b["type"] for b in paused["content"]] == [
        "server_tool_use",
        "tool_search_tool_result",
        "text",
    ]
    # One turn: both parts' blocks, text, calls and counts.
    assert turn.stop_reason == "tool_calls" and [c.name for c in turn.tool_calls] == ["list_dir"]
    assert turn.text == "Searching. Found it."
    assert [b["type"] for b in turn.blocks] == [*(b["type"] for b in paused["content"]),
                                                "text", "tool_use"]  # fmt: skip
    assert (turn.usage.input, turn.usage.output) == (250, 15)
    # The whole turn goes back in the next request as the vendor wrote its parts.
    history = [
        *HISTORY,
        Message("assistant", turn.text, tuple(turn.tool_calls), blocks=turn.blocks),
        Message("tool", "README.md", tool_call_id=turn.tool_calls[0].id),
    ]
    fake.set_script(lambda _r: Reply(text="done"))
    assert (await model.complete(history, TOOLS)).text == "done"


async def test_a_turn_paused_again_and_again_fails_closed(fake: FakeLLM) -> None:
    fake.set_script(lambda _r: Reply(text="", tool_search="directory listing", pause_turn=True))
    with pytest.raises(ProviderError, match="still paused after 5 continuations"):
        await make_model(fake).complete(HISTORY, TOOLS)
    assert len(bodies(fake)) == 6


async def test_the_regex_variant_and_a_pattern_it_cannot_compile(fake: FakeLLM) -> None:
    fake.set_script(
        lambda r: Reply(text="found", tool_search="(?i)SUB-AGENT" if r.turn == 0 else "(")
    )
    model = make_model(fake, tool_search="regex")
    first = await model.complete(HISTORY, TOOLS)
    assert bodies(fake)[0]["tools"][1] == {
        "type": "tool_search_tool_regex_20251119",
        "name": "tool_search_tool_regex",
        "cache_control": {"type": "ephemeral"},
    }
    assert first.blocks[1]["content"]["tool_references"] == [
        {"type": "tool_reference", "tool_name": "spawn_agent"}
    ]
    history = [
        *HISTORY,
        Message("assistant", first.text, blocks=first.blocks),
        Message("user", "?"),
    ]
    second = await model.complete(history, TOOLS)
    assert second.blocks[1]["content"] == {
        "type": "tool_search_tool_result_error",
        "error_code": "invalid_tool_input",
    }


async def test_off_and_openai_send_no_deferred_tool(fake: FakeLLM) -> None:
    fake.set_script(lambda _r: Reply(text="ok"))
    await make_model(fake, tool_search="off").complete(HISTORY, TOOLS)
    assert [t["name"] for t in bodies(fake)[0]["tools"]] == ["read_file"]
    await make_model(fake, "openai").complete(HISTORY, TOOLS)
    chat = next(r.body for r in fake.requests if r.path == "/v1/chat/completions")
    assert [t["function"]["name"] for t in chat["tools"]] == ["read_file"]


def test_tool_search_is_anthropic_only_and_on_by_default() -> None:
    base = {"key": "p", "base_url": "http://127.0.0.1:9", "model": "m"}
    assert ProviderConfig(kind="anthropic", **base).vendor_tool_search == "bm25"
    assert ProviderConfig(kind="anthropic", tool_search="off", **base).vendor_tool_search is None
    assert ProviderConfig(kind="openai", **base).vendor_tool_search is None
    with pytest.raises(ValidationError, match="tool_search is the Anthropic Messages API's"):
        ProviderConfig(kind="openai", tool_search="bm25", **base)


def _body(tools: list[dict[str, Any]], *messages: dict[str, Any]) -> dict[str, Any]:
    user = {"role": "user", "content": "hi"}
    return {"model": "m", "max_tokens": 10, "tools": tools, "messages": [user, *messages]}


def _deferred(name: str) -> dict[str, Any]:
    return {"name": name, "description": "d " * 200, "input_schema": SCHEMA, "defer_loading": True}


SEARCH = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}


def _found(name: str) -> dict[str, Any]:
    ref = {"type": "tool_reference", "tool_name": name}
    content = {"type": "tool_search_tool_search_result", "tool_references": [ref]}
    blocks = [
        {"type": "server_tool_use", "id": "srvtoolu_0", "name": SEARCH["name"], "input": {}},
        {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_0", "content": content},
    ]
    return {"role": "assistant", "content": blocks}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_body([_deferred("a")]), "All tools have defer_loading set"),
        (_body([SEARCH, _deferred("a")], _found("b")), "Tool reference 'b' has no corresponding"),
        (_body([{**SEARCH, "name": "search"}]), "name must be 'tool_search_tool_bm25'"),
    ],
    ids=["all-deferred", "unknown-reference", "search-tool-name"],
)
def test_the_fake_refuses_what_the_vendor_refuses(body: dict[str, Any], message: str) -> None:
    with pytest.raises(HttpError, match=message) as raised:
        anthropic_wire.validate(body, frozenset())
    assert raised.value.status == 400


def test_deferred_tools_weigh_nothing_until_found() -> None:
    shown = {"name": "read_file", "description": "r", "input_schema": SCHEMA}
    lean = _body([shown, SEARCH])
    deferred = _body([shown, SEARCH, _deferred("a"), _deferred("b")])
    assert prompt_tokens("anthropic", deferred) == prompt_tokens("anthropic", lean)
    after = _body([shown, SEARCH, _deferred("a"), _deferred("b")], _found("a"))
    # What a search found is expanded where its reference stands: one schema, not two.
    grown = prompt_tokens("anthropic", after) - prompt_tokens("anthropic", deferred)
    assert 100 < grown < 200


def test_a_script_file_searches() -> None:
    script = Script.from_dict({"scenarios": [{"turns": [{"tool_search": "git {{turn}}"}]}]})
    request = FakeRequest.from_body("anthropic", _body([SEARCH]))
    assert script(request).tool_search == "git 0"
