"""The OpenAI Chat Completions wire format: request checks, answers, streams and errors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from swarmdeck.testing.answer import (
    CREATED,
    Answer,
    HttpError,
    bad_request,
    check_common,
    thirds,
    words,
)
from swarmdeck.testing.request import FakeRequest

_OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_OPENAI_ERRORS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    402: ("insufficient_quota", "insufficient_quota"),
    403: ("permission_error", None),
    404: ("invalid_request_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def _openai_call_ids(index: int, message: Mapping[str, Any]) -> list[str]:
    """Ids of an assistant message's tool calls, checking their shape."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise bad_request(f"messages[{index}].tool_calls must be an array")
    ids = []
    for j, call in enumerate(calls):
        where = f"messages[{index}].tool_calls[{j}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(call, Mapping) or not isinstance(call.get("id"), str):
            raise bad_request(f"{where} must be an object with a string 'id'")
        if call.get("type") == "custom":
            _check_custom_call(where, call.get("custom"))
            ids.append(call["id"])
            continue
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise bad_request(f"{where}.function must be an object with a string 'name'")
        if not isinstance(function.get("arguments"), str):
            raise bad_request(f"{where}.function.arguments must be a string of JSON")
        ids.append(call["id"])
    return ids


def _check_custom_call(where: str, custom: Any) -> None:
    """A past call of a custom tool: its name and raw input."""
    if not isinstance(custom, Mapping) or not isinstance(custom.get("name"), str):
        raise bad_request(f"{where}.custom must be an object with a string 'name'")
    if not isinstance(custom.get("input"), str):
        raise bad_request(f"{where}.custom.input must be a string")


def _check_tools(tools: Any) -> None:
    """Each tool is a function (name, JSON schema) or a custom tool (name, format)."""
    for i, tool in enumerate(tools or []):
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        inner = tool.get(kind) if isinstance(kind, str) else None
        if kind not in ("function", "custom") or not isinstance(inner, Mapping):
            raise bad_request(f"tools[{i}] must be {{'type': 'function' or 'custom', ...}}")
        if not isinstance(inner.get("name"), str):
            raise bad_request(f"tools[{i}].{kind}.name must be a string")
        fmt = inner.get("format")
        if kind == "custom" and fmt is not None and fmt.get("type") not in ("text", "grammar"):
            raise bad_request(f"tools[{i}].custom.format.type must be 'text' or 'grammar'")


def validate(body: Any, quirks: frozenset[str]) -> FakeRequest:
    """Check a Chat Completions request the way the real APIs would; 400 on a problem."""
    messages = check_common(body)
    _check_tools(body.get("tools"))
    pending: set[str] = set()
    answerable: set[str] = set()
    for i, message in enumerate(messages):
        role = message["role"]
        if role not in _OPENAI_ROLES:
            raise bad_request(f"messages[{i}].role {role!r} is not a valid role")
        if not isinstance(message.get("content"), str | list | None):
            raise bad_request(f"messages[{i}].content must be a string, an array of parts, or null")
        if pending and role != "tool":
            raise bad_request(
                "an assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id' (missing: {', '.join(sorted(pending))})"
            )
        if role == "assistant":
            ids = _openai_call_ids(i, message)
            if ids and "reasoning_echo" in quirks and message.get("reasoning_content") is None:
                raise bad_request("reasoning_content is missing in assistant tool call message")
            pending, answerable = set(ids), set(ids)
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise bad_request(f"messages[{i}]: tool message without a string 'tool_call_id'")
            if call_id not in answerable:
                raise bad_request(
                    f"messages[{i}]: tool_call_id {call_id!r} matches no tool call "
                    "of the preceding assistant message"
                )
            pending.discard(call_id)
        else:
            answerable = set()
    if pending:
        raise bad_request(f"tool calls without tool messages: {', '.join(sorted(pending))}")
    choice = body.get("tool_choice")
    if "tool_choice_auto_only" in quirks and choice is not None and choice != "auto":
        raise bad_request(f"tool_choice only supports 'auto', got {json.dumps(choice)}")
    return FakeRequest.from_body("openai", body)


def usage_body(answer: Answer) -> dict[str, Any]:
    """Chat Completions usage; the detail objects only when the counts are set."""
    usage: dict[str, Any] = {
        "prompt_tokens": answer.input_tokens,
        "completion_tokens": answer.output_tokens,
        "total_tokens": answer.input_tokens + answer.output_tokens,
    }
    if answer.usage.cache_read is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": answer.usage.cache_read}
    if answer.usage.reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": answer.usage.reasoning}
    return usage


def _finish_reason(answer: Answer) -> str:
    """OpenAI finish reason."""
    return "tool_calls" if answer.calls else "stop"


def completion(answer: Answer) -> dict[str, Any]:
    """A non-streamed chat.completion object."""
    message: dict[str, Any] = {
        "role": "assistant",
        # Real APIs send null content when the turn is only tool calls.
        "content": answer.text if answer.text or not answer.calls else None,
        "refusal": None,
    }
    if answer.reasoning is not None:
        message["reasoning_content"] = answer.reasoning
    if answer.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "custom", "custom": {"name": c.name, "input": c.arguments}}
            if c.custom
            else {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in answer.calls
        ]
    return {
        "id": answer.id,
        "object": "chat.completion",
        "created": CREATED,
        "model": answer.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(answer),
                "logprobs": None,
            }
        ],
        "usage": usage_body(answer),
    }


def _openai_deltas(answer: Answer) -> list[dict[str, Any]]:
    """The delta objects of a streamed answer, in order."""
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"reasoning_content": piece} for piece in words(answer.reasoning or "")]
    deltas += [{"content": piece} for piece in words(answer.text)]
    for i, call in enumerate(answer.calls):
        if call.custom:
            # A custom tool's input streams in pieces like arguments (openai-openapi#576).
            start = {"index": i, "id": call.id, "type": "custom"}
            deltas.append({"tool_calls": [{**start, "custom": {"name": call.name, "input": ""}}]})
            deltas += [
                {"tool_calls": [{"index": i, "custom": {"input": piece}}]}
                for piece in thirds(call.arguments)
            ]
            continue
        # id and name go once, in the first chunk of each index; then only arguments.
        first = {
            "index": i,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        deltas.append({"tool_calls": [first]})
        deltas += [
            {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}
            for piece in thirds(call.arguments)
        ]
    return deltas


def stream(answer: Answer, include_usage: bool) -> list[str]:
    """SSE data payloads of a streamed answer, ending with [DONE]."""

    def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": answer.id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": answer.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
        if include_usage:
            body["usage"] = None
        return body

    chunks = [chunk(d, None) for d in _openai_deltas(answer)]
    chunks.append(chunk({}, _finish_reason(answer)))
    if include_usage:
        chunks.append({**chunk({}, None), "choices": [], "usage": usage_body(answer)})
    return [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]


def error_body(status: int, message: str) -> dict[str, Any]:
    """An error body in OpenAI's shape."""
    kind, code = _OPENAI_ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def context_error(style: str, prompt: int, completion: int, window: int) -> HttpError:
    """The 400 an OpenAI-compatible server answers a prompt over its window with: OpenAI's
    own (`context_length_exceeded`), vLLM's, or llama.cpp's, each with its real body."""
    asked = prompt + completion
    if style == "vllm":
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{asked} tokens ({prompt} in the messages, {completion} in the completion). "
            "Please reduce the length of the messages or completion."
        )
        body: dict[str, Any] = {
            "object": "error",
            "message": message,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
        return HttpError(400, message, body=body)
    if style == "llamacpp":
        message = "the request exceeds the available context size, try increasing it"
        body = {
            "error": {
                "code": 400,
                "message": message,
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": window,
            }
        }
        return HttpError(400, message, body=body)
    message = (
        f"This model's maximum context length is {window} tokens. However, your messages "
        f"resulted in {asked} tokens. Please reduce the length of the messages."
    )
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    return HttpError(400, message, body=body)
