"""The fake LLM's threaded HTTP front end: a thread per connection, blocking writes.

What a request is answered with is decided in exchange.py; this module only reads requests
off sockets and carries out the steps of their exchanges."""

from __future__ import annotations

import contextlib
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from swarmdeck.testing.answer import HttpError
from swarmdeck.testing.backend import Backend
from swarmdeck.testing.exchange import (
    SERVER_NAME,
    Close,
    Hangup,
    Pause,
    Send,
    exchange,
    protocol_error,
)
from swarmdeck.testing.framing import body_length, chunk_size, is_chunked


class Server(ThreadingHTTPServer):
    """Threading server that knows its FakeLLM and reports nothing on stderr."""

    daemon_threads = True
    block_on_close = False
    # Many sessions connect at once; a short backlog drops SYNs, and each retransmit costs
    # the client a second or more.
    request_queue_size = 2048

    def __init__(self, address: tuple[str, int], fake: Backend) -> None:
        self.fake = fake
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Silence: a dropped client is not an error worth a traceback here."""


class _Handler(BaseHTTPRequestHandler):
    """One connection: reads each request and carries out its exchange."""

    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes; with Nagle on, the client's delayed ACK
    # adds ~40 ms to every reply, which would swamp any latency measured through us.
    disable_nagle_algorithm = True
    server_version = SERVER_NAME
    sys_version = ""
    # Idle keep-alive connections end on their own rather than holding a thread forever.
    timeout = 60
    server: Server

    def setup(self) -> None:
        """Track the connection so stop() can close it."""
        super().setup()
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
        with contextlib.suppress(OSError):
            self.wfile.write(protocol_error(self.server.fake, code, message))

    def log_message(self, format: str, *args: Any) -> None:
        """The server prints nothing per request."""

    def do_GET(self) -> None:
        """GET requests."""
        self._handle()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def _handle(self) -> None:
        """Serve one request: read its body, then carry out its exchange's steps."""
        fake = self.server.fake
        arrived = time.monotonic()
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body: bytes | HttpError = self._read_body(headers)
        except HttpError as exc:
            body = exc
        except OSError:
            self._drop_connection()
            return
        steps = exchange(fake, self.command, self.path, headers, body, arrived)
        try:
            for step in steps:
                if isinstance(step, Send):
                    self.wfile.write(step.data)
                elif isinstance(step, Pause):
                    if not fake._sleep(step.seconds):
                        # Stopped while waiting: vanish like a server going down.
                        self._drop_connection()
                        return
                elif isinstance(step, Hangup):
                    self._drop_connection()
                    return
                elif isinstance(step, Close):
                    self.close_connection = True
        except OSError:
            self._drop_connection()
        finally:
            steps.close()

    def _read_body(self, headers: dict[str, str]) -> bytes:
        """The request body by Content-Length or chunked encoding."""
        if is_chunked(headers):
            data = bytearray()
            while True:
                size = chunk_size(self.rfile.readline(1024), len(data))
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline(1024)
        return self.rfile.read(body_length(headers))

    def _drop_connection(self) -> None:
        """Close the socket abruptly, as a crashing upstream would."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
