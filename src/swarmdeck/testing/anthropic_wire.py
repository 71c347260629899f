"""The Anthropic Messages wire format: request checks, answers, streams and errors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from swarmdeck.testing.answer import Answer, HttpError, bad_request, check_common, thirds, words
from swarmdeck.testing.request import SEARCH_TOOL_TYPES, FakeRequest
from swarmdeck.testing.tool_search import check_tools

_ANTHROPIC_ERRORS: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _anthropic_blocks(index: int, message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A message's content blocks (a string content has none that matter here)."""
    content = message.get("content")
    if isinstance(content, str):
        return []
    if not isinstance(content, list):
        raise bad_request(f"messages[{index}].content must be a string or an array of blocks")
    for j, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise bad_request(
                f"messages[{index}].content[{j}] must be an object with a string 'type'"
            )
    return content


def _tool_use_ids(index: int, blocks: list[Mapping[str, Any]]) -> set[str]:
    """Ids of an assistant message's tool_use blocks, checking their shape."""
    ids = set()
    for j, block in enumerate(blocks):
        if block["type"] != "tool_use":
            continue
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
            raise bad_request(
                f"messages[{index}].content[{j}]: tool_use needs a string 'id' and 'name'"
            )
        if not isinstance(block.get("input"), Mapping):
            raise bad_request(f"messages[{index}].content[{j}].input must be an object")
        ids.add(block["id"])
    return ids


def _check_tool_results(index: int, blocks: list[Mapping[str, Any]], expected: set[str]) -> None:
    """Every tool_result answers a tool_use of the previous message, and all are answered."""
    answered = set()
    for j, block in enumerate(blocks):
        if block["type"] != "tool_result":
            continue
        use_id = block.get("tool_use_id")
        if use_id not in expected:
            raise bad_request(
                f"messages[{index}].content[{j}]: tool_result tool_use_id {use_id!r} "
                "matches no tool_use block in the previous message"
            )
        answered.add(use_id)
    if missing := expected - answered:
        raise bad_request(
            "tool_use ids were found without tool_result blocks immediately after: "
            + ", ".join(sorted(missing))
        )


# Anthropic-defined client tools the fake knows: their type and the name they must have.
_CLIENT_TOOLS = {"text_editor_20250728": "str_replace_based_edit_tool"}


def _check_tools(tools: Any) -> None:
    """Custom tools have a name and an input_schema; Anthropic's own (the text editor) a
    known type, their fixed name, and no schema."""
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            raise bad_request(f"tools.{i}: a tool must be an object with a string 'name'")
        kind = tool.get("type", "custom")
        if kind in SEARCH_TOOL_TYPES:
            continue  # its name is checked with the deferred tools (testing/tool_search)
        if kind == "custom":
            if not isinstance(tool.get("input_schema"), Mapping):
                raise bad_request(f"tools.{i}.custom.input_schema: Field required")
        elif kind not in _CLIENT_TOOLS:
            raise bad_request(f"tools.{i}: unknown tool type {kind!r}")
        elif tool["name"] != _CLIENT_TOOLS[kind] or "input_schema" in tool:
            raise bad_request(f"tools.{i}.{kind}: name must be {_CLIENT_TOOLS[kind]!r}, no schema")


def validate(body: Any, quirks: frozenset[str]) -> FakeRequest:
    """Check a Messages request the way the real API would; 400 on a problem."""
    messages = check_common(body)
    _check_tools(body.get("tools"))
    check_tools(body, messages)
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise bad_request("missing or invalid required field 'max_tokens'")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise bad_request("'system' must be a string or an array of text blocks")
    expected: set[str] = set()
    for i, message in enumerate(messages):
        role = message["role"]
        if role not in ("user", "assistant"):
            raise bad_request(
                f"messages[{i}].role must be 'user' or 'assistant' (system goes in 'system')"
            )
        blocks = _anthropic_blocks(i, message)
        if role == "user":
            _check_tool_results(i, blocks, expected)
            expected = set()
        else:
            if expected:
                _check_tool_results(i, [], expected)
            expected = _tool_use_ids(i, blocks)
    if expected:
        _check_tool_results(len(messages), [], expected)
    choice = body.get("tool_choice")
    auto = isinstance(choice, Mapping) and choice.get("type") == "auto"
    if "tool_choice_auto_only" in quirks and choice is not None and not auto:
        raise bad_request(f"tool_choice only supports type 'auto', got {json.dumps(choice)}")
    return FakeRequest.from_body("anthropic", body)


def usage_body(answer: Answer) -> dict[str, int]:
    """Messages usage; cache counts are always present, as in the real API."""
    return {
        "input_tokens": answer.input_tokens,
        "output_tokens": answer.output_tokens,
        "cache_read_input_tokens": answer.usage.cache_read or 0,
        "cache_creation_input_tokens": answer.usage.cache_write or 0,
    }


def _tool_input(arguments: str) -> Any:
    """The tool_use input object; broken JSON stays a raw string so tests can see it."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments


def _stop_reason(answer: Answer) -> str:
    """Anthropic stop reason."""
    if answer.paused:
        return "pause_turn"
    return "tool_use" if answer.calls else "end_turn"


def _anthropic_has_text(answer: Answer) -> bool:
    """Whether the answer carries a text block (always, unless it is only tool calls)."""
    return bool(answer.text) or not answer.calls


def _search_blocks(answer: Answer) -> list[dict[str, Any]]:
    """The blocks of the search the model ran, if it did: its use, then its result."""
    if answer.search is None:
        return []
    return [answer.search.use_block(), answer.search.result_block()]


def message(answer: Answer) -> dict[str, Any]:
    """A non-streamed Messages response."""
    content: list[dict[str, Any]] = _search_blocks(answer)
    if _anthropic_has_text(answer):
        content.append({"type": "text", "text": answer.text})
    content += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _tool_input(c.arguments)}
        for c in answer.calls
    ]
    return {
        "id": answer.id,
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": _stop_reason(answer),
        "stop_sequence": None,
        "usage": usage_body(answer),
    }


def _anthropic_block_events(answer: Answer) -> list[dict[str, Any]]:
    """content_block_start / delta / stop events for every block."""
    blocks: list[tuple[dict[str, Any], str, str, list[str]]] = []
    if answer.search is not None:
        # The search's input streams as the model writes it; its result arrives whole.
        use = {**answer.search.use_block(), "input": {}}
        query = json.dumps(answer.search.input)
        blocks.append((use, "input_json_delta", "partial_json", thirds(query)))
        blocks.append((answer.search.result_block(), "", "", []))
    if _anthropic_has_text(answer):
        blocks.append(({"type": "text", "text": ""}, "text_delta", "text", words(answer.text)))
    for call in answer.calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        blocks.append((block, "input_json_delta", "partial_json", thirds(call.arguments)))
    events: list[dict[str, Any]] = []
    for index, (block, delta_type, field, pieces) in enumerate(blocks):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [
            {"type": "content_block_delta", "index": index, "delta": {"type": delta_type, field: p}}
            for p in pieces
        ]
        events.append({"type": "content_block_stop", "index": index})
    return events


def stream(answer: Answer, *, usage: bool = True) -> list[str]:
    """SSE events of a streamed answer, in the real API's order; without `usage`, no
    event carries token counts."""
    start = {**message(answer), "content": [], "stop_reason": None}
    start["usage"] = {**usage_body(answer), "output_tokens": 1}
    if not usage:
        del start["usage"]
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    events += _anthropic_block_events(answer)
    end: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": _stop_reason(answer), "stop_sequence": None},
    }
    if usage:
        end["usage"] = usage_body(answer)
    events.append(end)
    events.append({"type": "message_stop"})
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]


def error_body(status: int, message: str) -> dict[str, Any]:
    """An error body in Anthropic's shape."""
    kind = _ANTHROPIC_ERRORS.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def context_error(prompt: int, completion: int, window: int) -> HttpError:
    """Anthropic's 400 for a prompt over the window (`prompt is too long`)."""
    message = f"prompt is too long: {prompt + completion} tokens > {window} maximum"
    return HttpError(400, message, body=error_body(400, message))
