"""The fake LLM's HTTP server: routing, bodies, JSON and event-stream answers, errors."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from swarmdeck.testing import anthropic_wire, openai_wire
from swarmdeck.testing.answer import CREATED, Answer, HttpError, bad_request, build_answer, phrase
from swarmdeck.testing.prompt_cache import prompt_tokens
from swarmdeck.testing.script import Api, FakeRequest, Fault

if TYPE_CHECKING:
    from swarmdeck.testing.fake_llm import FakeLLM

FAKE_MODELS = ("fake-model",)
MAX_BODY_BYTES = 32 * 1024 * 1024

_DEFAULT_MESSAGES: dict[int, str] = {
    401: "invalid API key",
    402: "insufficient balance",
    429: "rate limit exceeded",
    500: "internal server error",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it (header names lower-cased; body None if not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    timestamp: float


def error_body(api: Api, status: int, message: str) -> dict[str, Any]:
    """An error body in the vendor's shape."""
    wire = anthropic_wire if api == "anthropic" else openai_wire
    return wire.error_body(status, message)


def _fault_error(fault: Fault) -> HttpError:
    """The error answer a scripted status fault produces."""
    status = fault.status or 500
    message = _DEFAULT_MESSAGES.get(status) or phrase(status).lower()
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


class Server(ThreadingHTTPServer):
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


class _Answered(Exception):
    """The exchange is over: what was sent is the whole answer."""


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
    server: Server
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
        text = message or phrase(code)
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
        except _Answered:
            pass
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
                error = bad_request(f"request body is not valid JSON: {exc}")
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
            raise bad_request("invalid Content-Length header") from None
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
            raise bad_request("malformed chunked request body") from None

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
        wire = openai_wire if api == "openai" else anthropic_wire
        validate = wire.validate
        request = validate(body, fake.quirks)
        self._check_window(api, request)
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
        cache = fake.cache.serve(api, request.body)
        answer = build_answer(api, reply, request, malformed=malformed, cache=cache)
        self._send_answer(api, answer, request, fault or Fault(), reply.chunk_delay)

    def _check_window(self, api: Api, request: FakeRequest) -> None:
        """Refuse a prompt that, with the output it asks room for, is over the model's
        window: with the vendor's 400, or (llama.cpp) a 200 whose stream is empty."""
        window, style = self.server.fake.window()
        if window is None:
            return
        prompt = prompt_tokens(api, request.body)
        asked = request.body.get("max_tokens", request.body.get("max_completion_tokens"))
        completion = asked if isinstance(asked, int) and not isinstance(asked, bool) else 0
        if prompt + completion <= window:
            return
        if style == "empty_stream" and request.stream:
            self._send_sse([])
            raise _Answered
        if api == "anthropic":
            raise anthropic_wire.context_error(prompt, completion, window)
        raise openai_wire.context_error(style, prompt, completion, window)

    def _send_answer(
        self, api: Api, answer: Answer, request: FakeRequest, fault: Fault, chunk_delay: float
    ) -> None:
        """The answer as JSON or as the vendor's event stream, as the fault has it."""
        cut = fault.cut_stream
        if not request.stream or fault.ignore_stream:
            payload = (
                openai_wire.completion(answer)
                if api == "openai"
                else anthropic_wire.message(answer)
            )
            self._send_json(200, payload, cut=cut)
        elif fault.empty_stream:
            self._send_sse([])
        elif api == "openai":
            options = request.body.get("stream_options")
            include_usage = isinstance(options, Mapping) and options.get("include_usage") is True
            events = openai_wire.stream(answer, include_usage and not fault.omit_usage)
            self._send_sse(events, cut=cut, gap=chunk_delay)
        else:
            events = anthropic_wire.stream(answer, usage=not fault.omit_usage)
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
