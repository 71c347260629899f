"""The OpenAI Responses wire format (`POST /v1/responses`): request checks, answers and the
typed event stream, as Codex CLI and `openai.OpenAI().responses` speak it.

A Responses request is read into the Chat Completions shape the rest of the fake knows
(`instructions` a system message, `function_call` items an assistant message's tool calls,
`function_call_output` items tool messages, the hosted tool search's `tool_search_call` and
`tool_search_output` items blocks of an assistant message's content, as Anthropic's search
blocks are), so scripts, fault counters, the tool search and the prompt cache treat it as
they treat a chat request; the raw body is kept beside the messages."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from swarmdeck.testing.answer import CREATED, Answer, WireCall, bad_request, thirds, words
from swarmdeck.testing.request import FakeRequest, deferred_tools, namespace_of

_ROLES = frozenset({"user", "assistant", "system", "developer"})
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})
# Items a stateless fake has nothing to make of: a model's own reasoning sent back, and
# references to items a server would have stored.
_IGNORED_ITEMS = frozenset({"reasoning", "item_reference", "compaction"})
_CALL_ITEMS = {"function_call": "function", "custom_tool_call": "custom"}
_OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
# The hosted tool search's items: what the model searched, what the server loaded.
_SEARCH_ITEMS = frozenset({"tool_search_call", "tool_search_output"})


def _text(content: Any) -> str:
    """The text of a message's content or a call's output: a string, or its text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") in _TEXT_PARTS
        )
    return ""


def _check_tools(tools: Any) -> None:
    """Function and custom tools are flat (`name` beside `type`); the hosted ones are
    taken as they come."""
    if tools is not None and not isinstance(tools, list):
        raise bad_request("'tools' must be an array")
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, Mapping) or not isinstance(tool.get("type"), str):
            raise bad_request(f"tools[{i}] must be an object with a string 'type'")
        if tool["type"] in ("function", "custom") and not isinstance(tool.get("name"), str):
            raise bad_request(f"tools[{i}].name must be a string")
        if tool["type"] == "namespace" and not (
            isinstance(tool.get("name"), str) and isinstance(tool.get("tools"), list)
        ):
            raise bad_request(f"tools[{i}]: a namespace needs a string 'name' and 'tools'")


def _call(index: int, item: Mapping[str, Any]) -> dict[str, Any]:
    """A past `function_call` or `custom_tool_call` item as a chat tool call."""
    kind = _CALL_ITEMS[item["type"]]
    field = "arguments" if kind == "function" else "input"
    call_id, name = item.get("call_id"), item.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise bad_request(f"input[{index}] must have a string 'call_id' and 'name'")
    if not isinstance(item.get(field), str):
        raise bad_request(f"input[{index}].{field} must be a string")
    if kind == "function":
        return {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": item[field]}}  # fmt: skip
    return {"id": call_id, "type": "custom", "custom": {"name": name, "input": item[field]}}


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's `instructions` and `input` as Chat Completions messages."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    items = body["input"]
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    calls: set[str] = set()
    # A server that stored the earlier turns would know their calls; this one cannot check.
    chained = body.get("previous_response_id") is not None
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise bad_request(f"input[{i}] must be an object")
        kind = item.get("type", "message")
        if kind in _IGNORED_ITEMS:
            continue
        if kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise bad_request(f"input[{i}].role {role!r} is not a valid role")
            text = _text(item.get("content"))
            last = messages[-1] if messages else {"role": None, "content": None}
            if role == last["role"] == "assistant" and isinstance(last["content"], list):
                # The text after a search is the same turn's.
                last["content"].append({"type": "text", "text": text})
            elif role == last["role"] == "user":
                # User items in a row are one user turn: Codex sends its environment
                # context, then the task, and a script's `match` looks for the task.
                messages[-1]["content"] += "\n" + text
            else:
                messages.append({"role": role, "content": text})
        elif kind in _CALL_ITEMS:
            call = _call(i, item)
            calls.add(call["id"])
            last = messages[-1] if messages else None
            # Text and the calls after it are one assistant turn, as the model gave them.
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in _SEARCH_ITEMS:
            _add_search_item(messages, dict(item))
        elif kind in _OUTPUT_ITEMS:
            call_id = item.get("call_id")
            if call_id not in calls and not chained:
                raise bad_request(
                    f"No tool call found for function call output with call_id {call_id}."
                )
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": _text(item.get("output"))}
            )
        else:
            raise bad_request(f"input[{i}].type {kind!r} is not supported by the fake LLM")
    return messages


def _add_search_item(messages: list[dict[str, Any]], item: dict[str, Any]) -> None:
    """A search item as a block of the assistant turn it belongs to (one it opens, when
    the last message is not the model's)."""
    last = messages[-1] if messages else None
    if last is None or last["role"] != "assistant":
        messages.append({"role": "assistant", "content": [item]})
        return
    if not isinstance(last["content"], list):
        text = last["content"]
        last["content"] = [{"type": "text", "text": text}] if text else []
    last["content"].append(item)


def validate(body: Any, quirks: frozenset[str]) -> FakeRequest:
    """Check a Responses request the way the real API would; 400 on a problem."""
    if not isinstance(body, Mapping):
        raise bad_request("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("missing required field 'model'")
    items = body.get("input")
    if not isinstance(items, str | list) or not items:
        raise bad_request("'input' must be a non-empty string or array of items")
    if "stream" in body and not isinstance(body["stream"], bool | None):
        raise bad_request("'stream' must be a boolean")
    _check_tools(body.get("tools"))
    chat: dict[str, Any] = {**body, "messages": _messages(body)}
    if isinstance(body.get("max_output_tokens"), int):
        # What the window check reads as the room the answer asks for.
        chat["max_tokens"] = body["max_output_tokens"]
    return FakeRequest.from_body("openai", chat)


def usage_body(answer: Answer) -> dict[str, Any]:
    """Responses usage: the input count holds the cached tokens, as in Chat Completions."""
    return {
        "input_tokens": answer.input_tokens,
        "input_tokens_details": {"cached_tokens": answer.usage.cache_read or 0},
        "output_tokens": answer.output_tokens,
        "output_tokens_details": {"reasoning_tokens": answer.usage.reasoning or 0},
        "total_tokens": answer.input_tokens + answer.output_tokens,
    }


def _suffix(answer: Answer) -> str:
    """The conversation part of the answer's id, shared by its items' ids."""
    return answer.id.split("-", 1)[-1]


def _reasoning_item(answer: Answer, done: bool) -> dict[str, Any]:
    summary = [{"type": "summary_text", "text": answer.reasoning or ""}] if done else []
    return {"id": f"rs_{_suffix(answer)}", "type": "reasoning", "summary": summary}


def _message_item(answer: Answer, done: bool) -> dict[str, Any]:
    content = [_text_part(answer.text)] if done else []
    return {
        "id": f"msg_{_suffix(answer)}",
        "type": "message",
        "status": "completed" if done else "in_progress",
        "role": "assistant",
        "content": content,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _call_item(
    call: WireCall, index: int, answer: Answer, spaces: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """A whole `function_call` (or `custom_tool_call`) item; a namespaced tool's call
    names its namespace."""
    if call.custom:
        return {"id": f"ctc_{index}_{_suffix(answer)}", "type": "custom_tool_call",
                "status": "completed", "call_id": call.id, "name": call.name,
                "input": call.arguments}  # fmt: skip
    item = {"id": f"fc_{index}_{_suffix(answer)}", "type": "function_call",
            "status": "completed", "call_id": call.id, "name": call.name,
            "arguments": call.arguments}  # fmt: skip
    space = spaces.get(call.name)
    return {**item, "namespace": space["name"]} if space else item


def _search_items(answer: Answer, request: FakeRequest) -> list[dict[str, Any]]:
    """The hosted search the model ran, if it did: its call, then what it loaded (the
    found tools' definitions as the request gave them)."""
    search = answer.search
    if search is None:
        return []
    suffix = f"{request.turn}_{_suffix(answer)}"
    deferred, spaces = deferred_tools(request.body), namespace_of(request.body)
    loaded: list[dict[str, Any]] = []
    opened: dict[str, dict[str, Any]] = {}
    for name in (n for n in search.found if n in deferred):
        tool = {k: v for k, v in deferred[name].items() if k != "defer_loading"}
        space = spaces.get(name)
        if not space:
            loaded.append(tool)
            continue
        # A namespace's tools come back inside it.
        if space["name"] not in opened:
            opened[space["name"]] = {**space, "tools": []}
            loaded.append(opened[space["name"]])
        opened[space["name"]]["tools"].append(tool)
    where = {"call_id": search.id, "execution": "server", "status": "completed"}
    return [
        {"id": f"tsc_{suffix}", "type": "tool_search_call", **where, "arguments": search.input},
        {"id": f"tso_{suffix}", "type": "tool_search_output", **where, "tools": loaded},
    ]


def _opened(item: dict[str, Any], answer: Answer) -> dict[str, Any]:
    """An output item as `response.output_item.added` shows it: nothing in it yet."""
    if item["type"] in _SEARCH_ITEMS:
        return {**item, "status": "in_progress"}
    if item["type"] == "message":
        return _message_item(answer, False)
    if item["type"] == "reasoning":
        return _reasoning_item(answer, False)
    field = "arguments" if item["type"] == "function_call" else "input"
    return {**item, "status": "in_progress", field: ""}


def _output(answer: Answer, request: FakeRequest) -> list[dict[str, Any]]:
    """The answer's output items, whole: reasoning, the search, the message, each call."""
    items = [_reasoning_item(answer, True)] if answer.reasoning is not None else []
    items += _search_items(answer, request)
    if answer.text or not answer.calls:
        items.append(_message_item(answer, True))
    spaces = namespace_of(request.body)
    items += [_call_item(c, i, answer, spaces) for i, c in enumerate(answer.calls)]
    return items


def response(
    answer: Answer, request: FakeRequest, *, done: bool = True, usage: bool = True
) -> dict[str, Any]:
    """A `response` object: whole when done, else as `response.created` shows it."""
    body = request.body
    return {
        "id": "resp_" + _suffix(answer),
        "object": "response",
        "created_at": CREATED,
        "status": "completed" if done else "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "model": answer.model,
        "output": _output(answer, request) if done else [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage_body(answer) if done and usage else None,
        "user": None,
    }


def _item_events(item: dict[str, Any], index: int, answer: Answer) -> list[dict[str, Any]]:
    """The events between an output item's `added` and `done`: its text or arguments in
    pieces, each piece's `done` with the whole."""
    where = {"item_id": item["id"], "output_index": index}
    kind = item["type"]
    if kind in _SEARCH_ITEMS:
        return []  # the server's own work arrives whole
    if kind == "message":
        part = {**where, "content_index": 0}
        return [
            {"type": "response.content_part.added", **part, "part": _text_part("")},
            *({"type": "response.output_text.delta", **part, "delta": piece, "logprobs": []}
              for piece in words(answer.text)),
            {"type": "response.output_text.done", **part, "text": answer.text, "logprobs": []},
            {"type": "response.content_part.done", **part, "part": _text_part(answer.text)},
        ]  # fmt: skip
    if kind == "reasoning":
        part = {**where, "summary_index": 0}
        text = answer.reasoning or ""
        return [
            *({"type": "response.reasoning_summary_text.delta", **part, "delta": piece}
              for piece in words(text)),
            {"type": "response.reasoning_summary_text.done", **part, "text": text},
        ]  # fmt: skip
    field = "arguments" if kind == "function_call" else "input"
    event = "response.function_call_arguments" if field == "arguments" else (
        "response.custom_tool_call_input")  # fmt: skip
    whole = item[field]
    return [
        *({"type": f"{event}.delta", **where, "delta": piece} for piece in thirds(whole)),
        {"type": f"{event}.done", **where, field: whole},
    ]


def stream(answer: Answer, request: FakeRequest, *, usage: bool = True) -> list[str]:
    """SSE events of a streamed answer, from `response.created` to `response.completed`
    (which carries the whole response and its usage)."""
    started = response(answer, request, done=False)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(_output(answer, request)):
        opened = _opened(item, answer)
        events.append({"type": "response.output_item.added", "output_index": index, "item": opened})
        events += _item_events(item, index, answer)
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append(
        {"type": "response.completed", "response": response(answer, request, usage=usage)}
    )
    return [
        f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': n})}\n\n"
        for n, event in enumerate(events)
    ]
