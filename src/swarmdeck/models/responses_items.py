"""OpenAI's Responses API in our terms: neutral messages as input items, tools as its flat
function tools (deferred ones behind its hosted tool search), and its usage and statuses.

The hosted tool search works like Anthropic's (models/tool_search.py): every tool is sent
on every turn, the deferred ones with `defer_loading: true` beside a `{"type":
"tool_search"}` tool; when the model searches, the answer carries a `tool_search_call` and
a `tool_search_output` item whose `tools` the model may call from then on. The tools list
never changes (what was found lives in the history), so the cached prefix holds; the
history must then go back as the vendor wrote it: a turn with a search keeps all of its
output items (Completion.blocks) and is sent back as those items, verbatim.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

from swarmdeck.models.adapter import field_of
from swarmdeck.models.edit_shapes import APPLY_PATCH, PATCH_GRAMMAR
from swarmdeck.models.estimate import namespace_description, namespace_of
from swarmdeck.models.types import Message, ToolSpec, Usage

SEARCH_TOOL = {"type": "tool_search"}
# Output items the vendor's own tool search wrote.
SERVER_ITEMS = frozenset({"tool_search_call", "tool_search_output"})
# Why an answer is incomplete, in the neutral (Chat Completions) stop reasons.
INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
# The HTTP status an error streamed after the 200 stands for, by its code: the same
# failure answered before the 200 is classified the same (models/errors.py).
ERROR_CODE_STATUS = {
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    "vector_store_timeout": 500,
    "context_length_exceeded": 400,
    "invalid_prompt": 400,
    "invalid_request_error": 400,
}


def instructions(messages: list[Message]) -> str:
    """The system messages' text, as the request's `instructions`."""
    return "\n\n".join(m.content for m in messages if m.role == "system" and m.content)


def input_items(messages: list[Message]) -> list[dict[str, Any]]:
    """Neutral messages (system aside) as Responses input items."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "user":
            items.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            items += _assistant_items(message)
        elif message.role == "tool":
            output = f"Error: {message.content}" if message.is_error else message.content
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id or "",
                    "output": output,
                }
            )
    return items


def _assistant_items(message: Message) -> list[dict[str, Any]]:
    """An assistant turn: as the vendor wrote it when it kept its items (a turn with a
    search, sent back verbatim), else its text and its function calls."""
    if message.blocks:
        # Copies: nothing done to the request may change the stored turn.
        return [copy.deepcopy(dict(item)) for item in message.blocks]
    items: list[dict[str, Any]] = []
    if message.content:
        items.append({"role": "assistant", "content": message.content})
    items += [
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments or "{}",
        }
        for call in message.tool_calls
    ]
    return items


def tools_list(tools: list[ToolSpec], hosted_search: bool) -> list[dict[str, Any]]:
    """The request's tools: those shown, then (with the hosted search and deferred tools)
    the search tool and the deferred ones in namespaces, an MCP server's in its own and
    swarmdeck's in one, of which the model sees only the name and description until a
    search loads them (the vendor's advice: a deferred function alone shows its name and
    description); without the search, deferred tools are not sent."""
    shown = [_function(t) for t in tools if not t.deferred]
    deferred = [t for t in tools if t.deferred]
    if not hosted_search or not deferred:
        return shown
    out = [*shown, dict(SEARCH_TOOL)]
    spaces: dict[str, dict[str, Any]] = {}
    for tool in deferred:
        group = namespace_of(tool)
        if group not in spaces:
            name = re.sub(r"[^A-Za-z0-9_-]", "_", group)
            spaces[group] = {"type": "namespace", "name": name, "tools": []}
            out.append(spaces[group])
        spaces[group]["tools"].append({**_function(tool), "defer_loading": True})
    for group, space in spaces.items():
        space["description"] = namespace_description(group, [t["name"] for t in space["tools"]])
    return out


def _function(tool: ToolSpec) -> dict[str, Any]:
    # Not strict: our schemas have optional properties, which strict mode forbids.
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "strict": False,
    }


def custom_patch(body: dict[str, Any]) -> dict[str, Any]:
    """The body with apply_patch as the Responses API's custom (freeform) tool, constrained
    by the patch grammar (models/edit_shapes.py), and past calls to it, and their results,
    as custom tool items."""
    body["tools"] = [
        _custom_patch_tool(t)
        if t.get("type") == "function" and t.get("name") == APPLY_PATCH
        and not t.get("defer_loading")
        else t
        for t in body.get("tools") or []
    ]  # fmt: skip
    patched: set[str] = set()
    items = []
    for item in body["input"]:
        kind = item.get("type")
        # A call in a namespace was to the deferred function, not the custom tool.
        if kind == "function_call" and item.get("name") == APPLY_PATCH and "namespace" not in item:
            item = {"type": "custom_tool_call", "call_id": item["call_id"],
                    "name": APPLY_PATCH, "input": _patch_of(item["arguments"])}  # fmt: skip
        if item.get("type") == "custom_tool_call":
            patched.add(str(item.get("call_id")))
        elif kind == "function_call_output" and item.get("call_id") in patched:
            item = {**item, "type": "custom_tool_call_output"}
        items.append(item)
    body["input"] = items
    return body


def _custom_patch_tool(tool: dict[str, Any]) -> dict[str, Any]:
    grammar = {"type": "grammar", "syntax": "lark", "definition": PATCH_GRAMMAR}
    description = (
        f"{tool.get('description', '')} This is a FREEFORM tool: send the patch itself, not JSON."
    )
    return {"type": "custom", "name": APPLY_PATCH, "description": description, "format": grammar}


def _patch_of(arguments: str) -> str:
    """The patch a neutral apply_patch call carries (`{"input": patch}`), or its raw text."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    return str(value.get("input", "")) if isinstance(value, dict) else arguments


def kept_items(items: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The output items to keep of an answer: all of them when the vendor's search ran in
    it, or it called a tool of a namespace (they go back verbatim, the call's namespace
    with it), else none (the neutral message says it all)."""
    if not any(item.get("type") in SERVER_ITEMS or item.get("namespace") for item in items):
        return ()
    return tuple(items)


def as_item(item: Any) -> dict[str, Any]:
    """An SDK output item (or a plain dict) as the JSON the API sent."""
    if isinstance(item, Mapping):
        return dict(item)
    to_dict = getattr(item, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict(mode="json", exclude_unset=True))
    return dict(item.model_dump(mode="json", exclude_unset=True))


def map_usage(raw: Any) -> Usage:
    """Responses usage as neutral Usage; its input count holds the cached tokens, ours not."""
    prompt = int(field_of(raw, "input_tokens") or 0)
    cached = int(field_of(field_of(raw, "input_tokens_details"), "cached_tokens") or 0)
    reasoning = field_of(field_of(raw, "output_tokens_details"), "reasoning_tokens")
    return Usage(
        input=max(0, prompt - cached),
        output=int(field_of(raw, "output_tokens") or 0),
        reasoning=int(reasoning or 0),
        cache_read=cached,
    )


def stop_reason(status: str | None, incomplete: Any, has_calls: bool) -> str:
    """A response's status (and why it is incomplete) as a neutral stop reason."""
    if status == "incomplete":
        reason = field_of(incomplete, "reason")
        return INCOMPLETE_REASONS.get(str(reason), str(reason or "length"))
    return "tool_calls" if has_calls else "stop"


def error_status(error: Any) -> tuple[int | None, dict[str, Any]]:
    """The HTTP status a streamed error stands for (None when its code says none) and its
    body for classification."""
    code = field_of(error, "code")
    body = {
        "error": {
            "message": str(field_of(error, "message") or ""),
            "code": code,
            "type": field_of(error, "type"),
        }
    }
    return ERROR_CODE_STATUS.get(str(code)), body
