"""One request to the fake LLM and its answer, apart from any socket: routing, bodies, JSON
and event-stream answers, scripted faults.

An exchange is a generator of steps (bytes to send, a pause, a hang-up) that a front end
carries out on its connection: the threaded server with blocking writes and the asyncio one
with its streams. Both thus answer byte for byte alike, from the same reply builders.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from email.utils import formatdate
from typing import Any
from urllib.parse import urlsplit

from swarmdeck.testing import anthropic_wire, openai_wire, responses_wire, tool_search
from swarmdeck.testing.answer import CREATED, Answer, HttpError, bad_request, build_answer, phrase
from swarmdeck.testing.backend import Backend, RecordedRequest
from swarmdeck.testing.prompt_cache import prompt_tokens
from swarmdeck.testing.reply import Fault
from swarmdeck.testing.request import Api, FakeRequest

FAKE_MODELS = ("fake-model",)
SERVER_NAME = "swarmdeck-fake-llm"

_DEFAULT_MESSAGES: dict[int, str] = {
    401: "invalid API key",
    402: "insufficient balance",
    429: "rate limit exceeded",
    500: "internal server error",
}
_ROUTES = {
    "/v1/chat/completions": "POST",
    "/v1/messages": "POST",
    "/v1/responses": "POST",
    "/v1/models": "GET",
    # Where llama.cpp and Ollama say their window (vLLM says it in /v1/models).
    "/props": "GET",
    "/api/show": "POST",
}


@dataclass(frozen=True)
class Send:
    """Bytes to write to the client."""

    data: bytes


@dataclass(frozen=True)
class Pause:
    """Wait this long before the next step; if the server stops meanwhile, drop the
    connection without a word, like a server going down."""

    seconds: float


@dataclass(frozen=True)
class Hangup:
    """Close the connection abruptly, as a crashing upstream would; nothing follows."""


@dataclass(frozen=True)
class Close:
    """The answer is whole; close the connection after it rather than keep it alive."""


Step = Send | Pause | Hangup | Close


class _Answered(Exception):
    """The exchange is over: what was sent is the whole answer."""


class _Dropped(Exception):
    """The answer was cut short on purpose: hang up."""


def error_body(api: Api, status: int, message: str) -> dict[str, Any]:
    """An error body in the vendor's shape."""
    wire = anthropic_wire if api == "anthropic" else openai_wire
    return wire.error_body(status, message)


def models_list(window: int | None = None) -> dict[str, Any]:
    """A model list both SDKs can parse (OpenAI and Anthropic fields side by side), with
    vLLM's `max_model_len` when the model has a window."""
    extra = {"max_model_len": window} if window else {}
    data = [
        {
            **extra,
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


def window_said(path: str, window: int | None) -> dict[str, Any]:
    """The model's window as llama.cpp's /props or Ollama's /api/show says it."""
    if path == "/props":
        return {"default_generation_settings": {"n_ctx": window or 0}, "total_slots": 1}
    info = {"general.architecture": "llama", "llama.context_length": window or 0}
    return {"parameters": f"num_ctx {window or 0}", "model_info": info}


def _head(
    fake: Backend, status: int, content_type: str, extra: Iterable[tuple[str, str]] = ()
) -> bytes:
    """Status line and the headers every answer has, ending the header block."""
    request_id = fake._next_request_id()
    lines = [
        f"HTTP/1.1 {status} {phrase(status)}",
        f"Server: {SERVER_NAME}",
        f"Date: {formatdate(usegmt=True)}",
        f"Content-Type: {content_type}",
        f"x-request-id: {request_id}",
        f"request-id: {request_id}",
        *(f"{name}: {value}" for name, value in extra),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def json_answer(
    fake: Backend, status: int, payload: Any, extra: Iterable[tuple[str, str]] = ()
) -> bytes:
    """A whole JSON answer: head and body."""
    data = json.dumps(payload).encode()
    head = _head(fake, status, "application/json", [*extra, ("Content-Length", str(len(data)))])
    return head + data


def protocol_error(fake: Backend, status: int, message: str | None = None) -> bytes:
    """The answer to a request that is not HTTP we can parse (it ends the connection)."""
    payload = error_body("openai", status, message or phrase(status))
    return json_answer(fake, status, payload, [("Connection", "close")])


def _fault_error(fault: Fault) -> HttpError:
    """The error answer a scripted status fault produces."""
    status = fault.status or 500
    message = _DEFAULT_MESSAGES.get(status) or phrase(status).lower()
    return HttpError(status, message, body=fault.body, retry_after=fault.retry_after)


def exchange(
    fake: Backend,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes | HttpError,
    arrived: float,
) -> Iterator[Step]:
    """Answer one request (header names lower-cased; `body` the error reading it raised, if
    it could not be read): every failure becomes an answer, never a crash."""
    path = urlsplit(target).path.rstrip("/")
    api: Api = "anthropic" if path.startswith("/v1/messages") else "openai"
    started = False
    fake._enter()
    try:
        if isinstance(body, HttpError):
            # The rest of the stream cannot be trusted to start a next request.
            yield Close()
            raise body
        parsed = _parse(fake, method, path, headers, body, arrived)
        for step in _route(fake, method, path, api, parsed, caller_key(headers)):
            started = started or isinstance(step, Send)
            yield step
    except _Answered:
        pass
    except _Dropped:
        yield Hangup()
    except HttpError as exc:
        yield from _error(fake, api, exc, started)
    except Exception as exc:  # a bug here or in a script callable: answer, do not die
        yield from _error(fake, api, HttpError(500, f"fake LLM internal error: {exc!r}"), started)
    finally:
        fake._leave()


def _parse(
    fake: Backend, method: str, path: str, headers: Mapping[str, str], raw: bytes, arrived: float
) -> Any:
    """Record the request, then parse its JSON body (400 if it is not JSON)."""
    parsed: Any = None
    error: HttpError | None = None
    if raw:
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            error = bad_request(f"request body is not valid JSON: {exc}")
    fake._record(RecordedRequest(method, path, dict(headers), parsed, arrived))
    if error is not None:
        raise error
    return parsed


def caller_key(headers: Mapping[str, str]) -> str:
    """The API key a request came with: the vendors' prompt caches are per key (per
    organisation), shared by every conversation made with it."""
    bearer = headers.get("authorization", "").removeprefix("Bearer ").strip()
    return headers.get("x-api-key") or bearer


def _route(
    fake: Backend, method: str, path: str, api: Api, body: Any, key: str = ""
) -> Iterator[Step]:
    """Dispatch by path and method."""
    if path not in _ROUTES:
        raise HttpError(404, f"no such endpoint: {method} {path}")
    if method != _ROUTES[path]:
        raise HttpError(405, f"method {method} not allowed on {path}")
    if path == "/v1/models":
        yield Send(json_answer(fake, 200, models_list(fake.window()[0])))
    elif path in ("/props", "/api/show"):
        yield Send(json_answer(fake, 200, window_said(path, fake.window()[0])))
    else:
        yield from _chat(fake, api, body, key, responses=path == "/v1/responses")


def _chat(
    fake: Backend, api: Api, body: Any, key: str = "", *, responses: bool = False
) -> Iterator[Step]:
    """Answer a chat request from the script (`responses`: one to OpenAI's Responses API,
    read as a Chat Completions request but answered in its own shape)."""
    wire = responses_wire if responses else openai_wire if api == "openai" else anthropic_wire
    request = wire.validate(body, fake.quirks)
    yield from _check_window(fake, api, request)
    reply = fake._reply(request)
    search = None
    # Chat Completions has no tool search; Anthropic's and the Responses API's do.
    if api == "anthropic" or responses:
        search = tool_search.run_search(reply, request)
        tool_search.check_calls(reply, request, search)
    fault = (
        reply.fault
        if reply.fault is not None and fake._faults.fires(reply.fault, request)
        else None
    )
    # Served what was cached as the request came in; what it leaves is kept once its
    # answer begins (a sibling sent meanwhile pays for the same prefix, as on the vendors').
    found = fake.cache.look(api, request.body, key)
    wait = fake.latency + reply.delay
    if wait > 0:
        yield Pause(wait)
    if fault is not None and fault.status is not None:
        raise _fault_error(fault)
    if fault is not None and fault.hang_up:
        raise _Dropped
    malformed = bool(fault and fault.malformed_arguments)
    fake.cache.keep(found)
    cache = found.use
    answer = build_answer(api, reply, request, malformed=malformed, cache=cache, search=search)
    if responses:
        yield from _answer_responses(fake, answer, request, fault or Fault(), reply.chunk_delay)
    else:
        yield from _answer(fake, api, answer, request, fault or Fault(), reply.chunk_delay)


def _check_window(fake: Backend, api: Api, request: FakeRequest) -> Iterator[Step]:
    """Refuse a prompt that, with the output it asks room for, is over the model's window:
    with the vendor's 400, or (llama.cpp) a 200 whose stream is empty."""
    window, style = fake.window()
    if window is None:
        return
    prompt = prompt_tokens(api, request.body)
    asked = request.body.get("max_tokens", request.body.get("max_completion_tokens"))
    completion = asked if isinstance(asked, int) and not isinstance(asked, bool) else 0
    if prompt + completion <= window:
        return
    if style == "empty_stream" and request.stream:
        yield from _sse(fake, [])
        raise _Answered
    if api == "anthropic":
        raise anthropic_wire.context_error(prompt, completion, window)
    raise openai_wire.context_error(style, prompt, completion, window)


def _answer_responses(
    fake: Backend, answer: Answer, request: FakeRequest, fault: Fault, gap: float
) -> Iterator[Step]:
    """A Responses answer: the `response` object, or its typed event stream."""
    if not request.stream or fault.ignore_stream:
        yield from _whole(fake, responses_wire.response(answer, request), fault.cut_stream)
    elif fault.empty_stream:
        yield from _sse(fake, [])
    else:
        events = responses_wire.stream(answer, request, usage=not fault.omit_usage)
        yield from _sse(fake, events, cut=fault.cut_stream, gap=gap)


def _whole(fake: Backend, payload: Any, cut: bool) -> Iterator[Step]:
    """A whole JSON answer; `cut` sends half its body (the head says more), so the client's
    parser sees it truncated."""
    data = json_answer(fake, 200, payload)
    if cut:
        body_at = data.index(b"\r\n\r\n") + 4
        yield Send(data[: body_at + (len(data) - body_at) // 2])
        raise _Dropped
    yield Send(data)


def _answer(
    fake: Backend, api: Api, answer: Answer, request: FakeRequest, fault: Fault, gap: float
) -> Iterator[Step]:
    """The answer as JSON or as the vendor's event stream, as the fault has it."""
    cut = fault.cut_stream
    if not request.stream or fault.ignore_stream:
        payload = (
            openai_wire.completion(answer) if api == "openai" else anthropic_wire.message(answer)
        )
        yield from _whole(fake, payload, cut)
    elif fault.empty_stream:
        yield from _sse(fake, [])
    elif api == "openai":
        options = request.body.get("stream_options")
        include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
        events = openai_wire.stream(answer, include_usage and not fault.omit_usage)
        yield from _sse(fake, events, cut=cut, gap=gap)
    else:
        events = anthropic_wire.stream(answer, usage=not fault.omit_usage)
        yield from _sse(fake, events, cut=cut, gap=gap)


def _sse(
    fake: Backend, events: list[str], *, cut: bool = False, gap: float = 0.0
) -> Iterator[Step]:
    """An event stream in chunked encoding, `gap` seconds between events; `cut` stops
    half-way without the final chunk. Events with no gap between them leave in one write:
    an answer split over many small writes costs both ends a syscall per piece."""
    head = _head(
        fake,
        200,
        "text/event-stream; charset=utf-8",
        [("Cache-Control", "no-cache"), ("Transfer-Encoding", "chunked")],
    )
    if cut:
        events = events[: max(1, len(events) // 2)]
    pending = [head]
    for i, event in enumerate(events):
        if i and gap:
            yield Send(b"".join(pending))
            pending = []
            yield Pause(gap)
        data = event.encode()
        pending.append(b"%x\r\n%s\r\n" % (len(data), data))
    if cut:
        # Without the terminating chunk the client's HTTP parser sees a truncated body.
        yield Send(b"".join(pending))
        raise _Dropped
    pending.append(b"0\r\n\r\n")
    yield Send(b"".join(pending))


def _error(fake: Backend, api: Api, error: HttpError, started: bool) -> Iterator[Step]:
    """An error in the vendor's shape, unless an answer was already under way."""
    if started:
        yield Hangup()
        return
    body = error.body if error.body is not None else error_body(api, error.status, error.message)
    extra = []
    if error.retry_after is not None:
        seconds = error.retry_after
        extra.append(
            ("Retry-After", str(int(seconds)) if seconds == int(seconds) else str(seconds))
        )
    yield Send(json_answer(fake, error.status, body, extra))
