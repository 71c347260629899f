"""A fake LLM server on loopback speaking OpenAI Chat Completions and Anthropic Messages."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from swarmdeck.errors import UsageError
from swarmdeck.testing.script import (
    Api,
    FakeRequest,
    Fault,
    FaultCounter,
    NoScenarioMatches,
    Reply,
    ReplyUsage,
    Script,
    ScriptFn,
    ScriptSource,
    as_script_fn,
    break_json,
    effective_usage,
)

KNOWN_QUIRKS = frozenset({"reasoning_echo", "tool_choice_auto_only"})
FAKE_MODELS = ("fake-model",)
# A fixed creation time keeps whole responses deterministic.
CREATED = 1_700_000_000
MAX_BODY_BYTES = 32 * 1024 * 1024
ARGUMENT_PIECES = 3

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
_DEFAULT_MESSAGES: dict[int, str] = {
    401: "invalid API key",
    402: "insufficient balance",
    429: "rate limit exceeded",
    500: "internal server error",
}


class HttpError(Exception):
    """An error answer: status, message, optional vendor body and Retry-After."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body
        self.retry_after = retry_after


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it (header names lower-cased; body None if not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    timestamp: float


@dataclass(frozen=True)
class _Call:
    """A tool call ready for the wire."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class _Answer:
    """A reply resolved for one vendor: ids assigned, usage filled, faults applied."""

    id: str
    model: str
    text: str
    reasoning: str | None
    calls: tuple[_Call, ...]
    usage: ReplyUsage

    @property
    def input_tokens(self) -> int:
        """Prompt count (always filled by effective_usage)."""
        return self.usage.input or 0

    @property
    def output_tokens(self) -> int:
        """Completion count (always filled by effective_usage)."""
        return self.usage.output or 0


# --- request validation -------------------------------------------------------------------


def _bad(message: str) -> HttpError:
    """A 400 answer."""
    return HttpError(400, message)


def _check_common(body: Any) -> list[Mapping[str, Any]]:
    """Checks both vendors share; returns the messages."""
    if not isinstance(body, Mapping):
        raise _bad("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("missing required field 'model'")
    messages = body.get("messages")
    if messages is None:
        raise _bad("missing required field 'messages'")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise _bad(f"messages[{i}] must be an object with a string 'role'")
    if "stream" in body and not isinstance(body["stream"], bool | None):
        raise _bad("'stream' must be a boolean")
    if body.get("tools") is not None and not isinstance(body["tools"], list):
        raise _bad("'tools' must be an array")
    return messages


def _openai_call_ids(index: int, message: Mapping[str, Any]) -> list[str]:
    """Ids of an assistant message's tool calls, checking their shape."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _bad(f"messages[{index}].tool_calls must be an array")
    ids = []
    for j, call in enumerate(calls):
        where = f"messages[{index}].tool_calls[{j}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(call, Mapping) or not isinstance(call.get("id"), str):
            raise _bad(f"{where} must be an object with a string 'id'")
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise _bad(f"{where}.function must be an object with a string 'name'")
        if not isinstance(function.get("arguments"), str):
            raise _bad(f"{where}.function.arguments must be a string of JSON")
        ids.append(call["id"])
    return ids


def validate_openai(body: Any, quirks: frozenset[str]) -> FakeRequest:
    """Check a Chat Completions request the way the real APIs would; 400 on a problem."""
    messages = _check_common(body)
    pending: set[str] = set()
    answerable: set[str] = set()
    for i, message in enumerate(messages):
        role = message["role"]
        if role not in _OPENAI_ROLES:
            raise _bad(f"messages[{i}].role {role!r} is not a valid role")
        if not isinstance(message.get("content"), str | list | None):
            raise _bad(f"messages[{i}].content must be a string, an array of parts, or null")
        if pending and role != "tool":
            raise _bad(
                "an assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id' (missing: {', '.join(sorted(pending))})"
            )
        if role == "assistant":
            ids = _openai_call_ids(i, message)
            if ids and "reasoning_echo" in quirks and message.get("reasoning_content") is None:
                raise _bad("reasoning_content is missing in assistant tool call message")
            pending, answerable = set(ids), set(ids)
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise _bad(f"messages[{i}]: tool message without a string 'tool_call_id'")
            if call_id not in answerable:
                raise _bad(
                    f"messages[{i}]: tool_call_id {call_id!r} matches no tool call "
                    "of the preceding assistant message"
                )
            pending.discard(call_id)
        else:
            answerable = set()
    if pending:
        raise _bad(f"tool calls without tool messages: {', '.join(sorted(pending))}")
    choice = body.get("tool_choice")
    if "tool_choice_auto_only" in quirks and choice is not None and choice != "auto":
        raise _bad(f"tool_choice only supports 'auto', got {json.dumps(choice)}")
    return FakeRequest.from_body("openai", body)


def _anthropic_blocks(index: int, message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """A message's content blocks (a string content has none that matter here)."""
    content = message.get("content")
    if isinstance(content, str):
        return []
    if not isinstance(content, list):
        raise _bad(f"messages[{index}].content must be a string or an array of blocks")
    for j, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise _bad(f"messages[{index}].content[{j}] must be an object with a string 'type'")
    return content


def _tool_use_ids(index: int, blocks: list[Mapping[str, Any]]) -> set[str]:
    """Ids of an assistant message's tool_use blocks, checking their shape."""
    ids = set()
    for j, block in enumerate(blocks):
        if block["type"] != "tool_use":
            continue
        if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
            raise _bad(f"messages[{index}].content[{j}]: tool_use needs a string 'id' and 'name'")
        if not isinstance(block.get("input"), Mapping):
            raise _bad(f"messages[{index}].content[{j}].input must be an object")
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
            raise _bad(
                f"messages[{index}].content[{j}]: tool_result tool_use_id {use_id!r} "
                "matches no tool_use block in the previous message"
            )
        answered.add(use_id)
    if missing := expected - answered:
        raise _bad(
            "tool_use ids were found without tool_result blocks immediately after: "
            + ", ".join(sorted(missing))
        )


def validate_anthropic(body: Any, quirks: frozenset[str]) -> FakeRequest:
    """Check a Messages request the way the real API would; 400 on a problem."""
    messages = _check_common(body)
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise _bad("missing or invalid required field 'max_tokens'")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise _bad("'system' must be a string or an array of text blocks")
    expected: set[str] = set()
    for i, message in enumerate(messages):
        role = message["role"]
        if role not in ("user", "assistant"):
            raise _bad(
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
        raise _bad(f"tool_choice only supports type 'auto', got {json.dumps(choice)}")
    return FakeRequest.from_body("anthropic", body)


# --- building answers ----------------------------------------------------------------------


def build_answer(api: Api, reply: Reply, request: FakeRequest, *, malformed: bool) -> _Answer:
    """Resolve a reply for the wire: deterministic ids, broken arguments if asked."""
    prefix = "call" if api == "openai" else "toolu"
    calls = tuple(
        _Call(
            id=f"{prefix}_{request.turn}_{i}",
            name=call.name,
            arguments=break_json(call.arguments_text()) if malformed else call.arguments_text(),
        )
        for i, call in enumerate(reply.tool_calls)
    )
    id_prefix = "chatcmpl-" if api == "openai" else "msg_"
    return _Answer(
        id=id_prefix + request.conversation_key[:24],
        model=request.model,
        text=reply.text,
        reasoning=reply.reasoning,
        calls=calls,
        usage=effective_usage(reply, request),
    )


def _words(text: str) -> list[str]:
    """Text split into word-sized stream deltas (with their trailing spaces)."""
    return re.findall(r"\s*\S+\s*|\s+", text)


def _thirds(text: str) -> list[str]:
    """Arguments split into a few pieces, so clients must reassemble them."""
    if not text:
        return []
    size = -(-len(text) // ARGUMENT_PIECES)
    return [text[i : i + size] for i in range(0, len(text), size)]


def openai_usage(answer: _Answer) -> dict[str, Any]:
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


def _finish_reason(answer: _Answer) -> str:
    """OpenAI finish reason."""
    return "tool_calls" if answer.calls else "stop"


def openai_completion(answer: _Answer) -> dict[str, Any]:
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
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
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
        "usage": openai_usage(answer),
    }


def _openai_deltas(answer: _Answer) -> list[dict[str, Any]]:
    """The delta objects of a streamed answer, in order."""
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"reasoning_content": piece} for piece in _words(answer.reasoning or "")]
    deltas += [{"content": piece} for piece in _words(answer.text)]
    for i, call in enumerate(answer.calls):
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
            for piece in _thirds(call.arguments)
        ]
    return deltas


def openai_stream(answer: _Answer, include_usage: bool) -> list[str]:
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
        chunks.append({**chunk({}, None), "choices": [], "usage": openai_usage(answer)})
    return [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]


def anthropic_usage(answer: _Answer) -> dict[str, int]:
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


def _stop_reason(answer: _Answer) -> str:
    """Anthropic stop reason."""
    return "tool_use" if answer.calls else "end_turn"


def _anthropic_has_text(answer: _Answer) -> bool:
    """Whether the answer carries a text block (always, unless it is only tool calls)."""
    return bool(answer.text) or not answer.calls


def anthropic_message(answer: _Answer) -> dict[str, Any]:
    """A non-streamed Messages response."""
    content: list[dict[str, Any]] = []
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
        "usage": anthropic_usage(answer),
    }


def _anthropic_block_events(answer: _Answer) -> list[dict[str, Any]]:
    """content_block_start / delta / stop events for every block."""
    events: list[dict[str, Any]] = []
    index = 0
    if _anthropic_has_text(answer):
        events.append(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            }
        )
        events += [
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": piece},
            }
            for piece in _words(answer.text)
        ]
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    for call in answer.calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in _thirds(call.arguments)
        ]
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    return events


def anthropic_stream(answer: _Answer, *, usage: bool = True) -> list[str]:
    """SSE events of a streamed answer, in the real API's order; without `usage`, no
    event carries token counts."""
    start = {**anthropic_message(answer), "content": [], "stop_reason": None}
    start["usage"] = {**anthropic_usage(answer), "output_tokens": 1}
    if not usage:
        del start["usage"]
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    events += _anthropic_block_events(answer)
    end: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": _stop_reason(answer), "stop_sequence": None},
    }
    if usage:
        end["usage"] = anthropic_usage(answer)
    events.append(end)
    events.append({"type": "message_stop"})
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]


def error_body(api: Api, status: int, message: str) -> dict[str, Any]:
    """An error body in the vendor's shape."""
    if api == "anthropic":
        kind = _ANTHROPIC_ERRORS.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind, code = _OPENAI_ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _phrase(status: int) -> str:
    """The reason phrase of a status, also for codes http.HTTPStatus does not know."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"error {status}"


def _fault_error(fault: Fault) -> HttpError:
    """The error answer a scripted status fault produces."""
    status = fault.status or 500
    message = _DEFAULT_MESSAGES.get(status) or _phrase(status).lower()
    return HttpError(status, message, body=fault.body, retry_after=fault.retry_after)


def models_list() -> dict[str, Any]:
    """A model list both SDKs can parse (OpenAI and Anthropic fields side by side)."""
    data = [
        {
            "id": name,
            "object": "model",
            "type": "model",
            "created": CREATED,
            "owned_by": "swarmdeck",
            "display_name": name,
            "created_at": "2023-11-14T22:13:20Z",
        }
        for name in FAKE_MODELS
    ]
    return {
        "object": "list",
        "data": data,
        "has_more": False,
        "first_id": FAKE_MODELS[0],
        "last_id": FAKE_MODELS[-1],
    }


# --- the HTTP server -----------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    """Threading server that knows its FakeLLM and reports nothing on stderr."""

    daemon_threads = True
    block_on_close = False
    # Many sessions connect at once; a short backlog drops SYNs, and each retransmit costs
    # the client a second or more.
    request_queue_size = 2048

    def __init__(self, address: tuple[str, int], fake: FakeLLM) -> None:
        self.fake = fake
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Silence: a dropped client is not an error worth a traceback here."""


class _ClientGone(Exception):
    """The exchange cannot go on: the client left or the server is stopping."""


class _Handler(BaseHTTPRequestHandler):
    """One connection: routes requests to the chat endpoints and the model list."""

    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes; with Nagle on, the client's delayed ACK
    # adds ~40 ms to every reply, which would swamp any latency measured through us.
    disable_nagle_algorithm = True
    server_version = "swarmdeck-fake-llm"
    sys_version = ""
    # Idle keep-alive connections end on their own rather than holding a thread forever.
    timeout = 60
    server: _Server
    _started: bool = False

    def setup(self) -> None:
        """Track the connection so stop() can close it."""
        super().setup()
        self._started = False
        self.server.fake._track(self.connection)

    def finish(self) -> None:
        """Untrack the connection."""
        try:
            super().finish()
        finally:
            self.server.fake._untrack(self.connection)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol-level errors (bad request line, bad headers) as JSON, then hang up."""
        self.close_connection = True
        text = message or _phrase(code)
        with contextlib.suppress(OSError):
            self._send_json(code, error_body("openai", code, text), extra=[("Connection", "close")])

    def log_message(self, format: str, *args: Any) -> None:
        """The server prints nothing per request."""

    def do_GET(self) -> None:
        """GET requests."""
        self._handle()

    def do_POST(self) -> None:
        """POST requests."""
        self._handle()

    do_PUT = do_DELETE = do_PATCH = do_GET

    # -- plumbing --

    def _handle(self) -> None:
        """Serve one request; every failure becomes an answer, never a crash."""
        fake = self.server.fake
        path = urlsplit(self.path).path.rstrip("/")
        api: Api = "anthropic" if path.startswith("/v1/messages") else "openai"
        self._started = False
        fake._enter()
        try:
            body = self._read_and_record(path)
            self._route(path, api, body)
        except HttpError as exc:
            self._send_error(api, exc)
        except (_ClientGone, OSError):
            self._drop_connection()
        except Exception as exc:  # a bug here or in a script callable: answer, do not die
            self._send_error(api, HttpError(500, f"fake LLM internal error: {exc!r}"))
        finally:
            fake._leave()

    def _read_and_record(self, path: str) -> Any:
        """Read the body, record the request, then parse JSON (400 if it is not)."""
        arrived = time.monotonic()
        raw = self._read_body()
        body: Any = None
        error: HttpError | None = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError as exc:
                error = _bad(f"request body is not valid JSON: {exc}")
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.fake._record(RecordedRequest(self.command, path, headers, body, arrived))
        if error is not None:
            raise error
        return body

    def _read_body(self) -> bytes:
        """The request body by Content-Length or chunked encoding."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise _bad("invalid Content-Length header") from None
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            raise HttpError(413, "request body too large")
        return self.rfile.read(length)

    def _read_chunked(self) -> bytes:
        """A chunked request body."""
        data = bytearray()
        try:
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                if size < 0 or len(data) + size > MAX_BODY_BYTES:
                    self.close_connection = True
                    raise HttpError(413, "request body too large")
                data += self.rfile.read(size)
                self.rfile.readline(1024)
        except ValueError:
            self.close_connection = True
            raise _bad("malformed chunked request body") from None

    def _route(self, path: str, api: Api, body: Any) -> None:
        """Dispatch by path and method."""
        routes = {"/v1/chat/completions": "POST", "/v1/messages": "POST", "/v1/models": "GET"}
        if path not in routes:
            raise HttpError(404, f"no such endpoint: {self.command} {path}")
        if self.command != routes[path]:
            raise HttpError(405, f"method {self.command} not allowed on {path}")
        if path == "/v1/models":
            self._send_json(200, models_list())
        else:
            self._chat(api, body)

    def _chat(self, api: Api, body: Any) -> None:
        """Answer a chat request from the script."""
        fake = self.server.fake
        validate = validate_openai if api == "openai" else validate_anthropic
        request = validate(body, fake.quirks)
        reply = fake._reply(request)
        fault = (
            reply.fault
            if reply.fault is not None and fake._faults.fires(reply.fault, request)
            else None
        )
        if not fake._sleep(fake.latency + reply.delay):
            # Stopped while waiting: vanish like a server going down, do not answer.
            raise _ClientGone
        if fault is not None and fault.status is not None:
            raise _fault_error(fault)
        malformed = bool(fault and fault.malformed_arguments)
        answer = build_answer(api, reply, request, malformed=malformed)
        self._send_answer(api, answer, request, fault or Fault(), reply.chunk_delay)

    def _send_answer(
        self, api: Api, answer: _Answer, request: FakeRequest, fault: Fault, chunk_delay: float
    ) -> None:
        """The answer as JSON or as the vendor's event stream, as the fault has it."""
        cut = fault.cut_stream
        if not request.stream or fault.ignore_stream:
            payload = openai_completion(answer) if api == "openai" else anthropic_message(answer)
            self._send_json(200, payload, cut=cut)
        elif fault.empty_stream:
            self._send_sse([])
        elif api == "openai":
            options = request.body.get("stream_options")
            include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
            events = openai_stream(answer, include_usage and not fault.omit_usage)
            self._send_sse(events, cut=cut, gap=chunk_delay)
        else:
            events = anthropic_stream(answer, usage=not fault.omit_usage)
            self._send_sse(events, cut=cut, gap=chunk_delay)

    def _begin(self, status: int, content_type: str, extra: Iterable[tuple[str, str]] = ()) -> None:
        """Status line and the headers every answer has."""
        self._started = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        request_id = self.server.fake._next_request_id()
        self.send_header("x-request-id", request_id)
        self.send_header("request-id", request_id)
        for name, value in extra:
            self.send_header(name, value)

    def _send_json(
        self, status: int, payload: Any, *, cut: bool = False, extra: Iterable[tuple[str, str]] = ()
    ) -> None:
        """A JSON answer; `cut` sends half of it and drops the connection."""
        data = json.dumps(payload).encode()
        self._begin(status, "application/json", [*extra, ("Content-Length", str(len(data)))])
        self.end_headers()
        if cut:
            self.wfile.write(data[: len(data) // 2])
            self._drop_connection()
            return
        self.wfile.write(data)

    def _send_sse(self, events: list[str], *, cut: bool = False, gap: float = 0.0) -> None:
        """An event stream in chunked encoding, `gap` seconds between events; `cut` stops
        half-way without the final chunk."""
        self._begin(
            200,
            "text/event-stream; charset=utf-8",
            [("Cache-Control", "no-cache"), ("Transfer-Encoding", "chunked")],
        )
        self.end_headers()
        if cut:
            events = events[: max(1, len(events) // 2)]
        for i, event in enumerate(events):
            if i and gap:
                self.wfile.flush()
                if not self.server.fake._sleep(gap):
                    raise _ClientGone
            data = event.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        if cut:
            # Without the terminating chunk the client's HTTP parser sees a truncated body.
            self._drop_connection()
            return
        self.wfile.write(b"0\r\n\r\n")

    def _send_error(self, api: Api, error: HttpError) -> None:
        """An error in the vendor's shape, unless an answer was already under way."""
        if self._started:
            self._drop_connection()
            return
        body = (
            error.body if error.body is not None else error_body(api, error.status, error.message)
        )
        extra = []
        if error.retry_after is not None:
            seconds = error.retry_after
            extra.append(
                ("Retry-After", str(int(seconds)) if seconds == int(seconds) else str(seconds))
            )
        with contextlib.suppress(OSError):
            self._send_json(error.status, body, extra=extra)

    def _drop_connection(self) -> None:
        """Close the socket abruptly, as a crashing upstream would."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)


# --- the public server ---------------------------------------------------------------------


class FakeLLM:
    """A scripted OpenAI + Anthropic compatible server on loopback, for tests."""

    def __init__(
        self,
        script: ScriptSource = None,
        *,
        latency: float = 0.0,
        quirks: Iterable[str] = frozenset(),
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.latency = latency
        self.quirks = frozenset(quirks)
        self.host = host
        self._wanted_port = port
        self._script_fn: ScriptFn = as_script_fn(script)
        self._faults = FaultCounter()
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._in_flight = 0
        self._max_concurrent = 0
        self._request_ids = itertools.count(1)
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def quirks(self) -> frozenset[str]:
        """Vendor quirks the server enforces (see KNOWN_QUIRKS)."""
        return self._quirks

    @quirks.setter
    def quirks(self, value: Iterable[str]) -> None:
        quirks = frozenset(value)
        if unknown := quirks - KNOWN_QUIRKS:
            raise ValueError(
                f"unknown fake LLM quirks: {sorted(unknown)}; known: {sorted(KNOWN_QUIRKS)}"
            )
        self._quirks = quirks

    # -- lifecycle --

    def start(self) -> Self:
        """Bind and serve in a daemon thread."""
        if self._server is not None:
            raise RuntimeError("fake LLM already started")
        self._stopping.clear()
        self._server = _Server((self.host, self._wanted_port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            # stop() waits up to one poll interval; keep it short so fixtures tear down fast.
            kwargs={"poll_interval": 0.02},
            name="fake-llm",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, wake delayed answers and close open connections."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if thread is not None:
            thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- addresses --

    @property
    def port(self) -> int:
        """The bound port (the real one when started on port 0)."""
        if self._server is None:
            if self._wanted_port:
                return self._wanted_port
            raise RuntimeError("fake LLM not started")
        return int(self._server.server_address[1])

    @property
    def openai_base_url(self) -> str:
        """base_url for openai.AsyncOpenAI."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """base_url for anthropic.AsyncAnthropic (the SDK appends /v1/messages)."""
        return f"http://{self.host}:{self.port}"

    # -- script and stats --

    def set_script(self, script: ScriptSource) -> None:
        """Replace the script (Script, dict, path, or callable) and its fault counters."""
        script_fn = as_script_fn(script)
        with self._lock:
            self._script_fn = script_fn
            self._faults.reset()

    @property
    def requests(self) -> list[RecordedRequest]:
        """Snapshot of the requests received since start or reset_stats()."""
        with self._lock:
            return list(self._requests)

    @property
    def max_concurrent(self) -> int:
        """The most requests that were being served at the same moment."""
        with self._lock:
            return self._max_concurrent

    @property
    def in_flight(self) -> int:
        """Requests being served now (a reply the client has read may not have ended yet)."""
        with self._lock:
            return self._in_flight

    def reset_stats(self) -> None:
        """Forget recorded requests; the concurrency peak restarts from what is in flight."""
        with self._lock:
            self._requests.clear()
            self._max_concurrent = self._in_flight

    # -- used by the handler --

    def _reply(self, request: FakeRequest) -> Reply:
        """Ask the script; a script that cannot answer is a 400 or 500."""
        with self._lock:
            script_fn = self._script_fn
        try:
            reply = script_fn(request)
        except NoScenarioMatches as exc:
            raise _bad(str(exc)) from exc
        except Exception as exc:
            raise HttpError(500, f"fake LLM script failed: {exc!r}") from exc
        if not isinstance(reply, Reply):
            raise HttpError(500, f"fake LLM script returned {type(reply).__name__}, not Reply")
        return reply

    def _sleep(self, seconds: float) -> bool:
        """Wait, ending early when the server stops; False if it did."""
        if seconds > 0:
            return not self._stopping.wait(seconds)
        return not self._stopping.is_set()

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self._max_concurrent = max(self._max_concurrent, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_request_id(self) -> str:
        with self._lock:
            return f"req_fake_{next(self._request_ids)}"

    def _track(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.add(conn)

    def _untrack(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections.discard(conn)


def run_fake_llm(port: int, script_path: Path, host: str = "127.0.0.1") -> None:
    """Serve `script_path` on host:port until SIGINT or SIGTERM (call from the main thread)."""
    script = Script.load(script_path)
    stop = threading.Event()
    server = FakeLLM(script, host=host, port=port)
    try:
        server.start()
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            "pick another --port, or 0 for a free one",
        ) from None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(f"fake LLM listening on http://{host}:{server.port}", file=sys.stderr, flush=True)
        # A timed wait keeps the main thread responsive to signals on every platform.
        while not stop.wait(0.2):
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
