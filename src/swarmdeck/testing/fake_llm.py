"""A fake LLM server on loopback speaking OpenAI Chat Completions, the OpenAI Responses API
and Anthropic Messages.

The wire formats live in openai_wire.py, responses_wire.py and anthropic_wire.py, what a request is answered
with in exchange.py, and the two HTTP front ends in http_server.py (a thread per connection)
and aio_server.py (one event loop); this module is the public face tests use.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Self

from swarmdeck.errors import UsageError
from swarmdeck.testing.aio_server import AsyncServer
from swarmdeck.testing.answer import HttpError, bad_request
from swarmdeck.testing.backend import RecordedRequest
from swarmdeck.testing.http_server import Server
from swarmdeck.testing.prompt_cache import DEFAULT_MIN_CACHED_TOKENS, PromptCache
from swarmdeck.testing.reply import FaultCounter, Reply
from swarmdeck.testing.request import FakeRequest
from swarmdeck.testing.script import (
    NoScenarioMatches,
    OverflowStyle,
    Script,
    ScriptFn,
    ScriptSource,
    as_script_fn,
)

__all__ = ["KNOWN_QUIRKS", "FakeLLM", "RecordedRequest", "run_fake_llm"]

KNOWN_QUIRKS = frozenset({"reasoning_echo", "tool_choice_auto_only"})

# "threads": a thread per connection, so a script callable may block without holding up
# other requests. "asyncio": one event loop for all, far cheaper with many concurrent
# clients (what `swarmdeck fake-llm` serves benchmarks with).
Frontend = Literal["threads", "asyncio"]


class FakeLLM:
    """A scripted OpenAI (chat and Responses) + Anthropic compatible server on loopback, for
    tests."""

    def __init__(
        self,
        script: ScriptSource = None,
        *,
        latency: float = 0.0,
        quirks: Iterable[str] = frozenset(),
        host: str = "127.0.0.1",
        port: int = 0,
        context_tokens: int | None = None,
        overflow: OverflowStyle | None = None,
        cache_min_tokens: int = DEFAULT_MIN_CACHED_TOKENS,
        frontend: Frontend = "threads",
    ) -> None:
        self.latency = latency
        self.frontend = frontend
        # The model's window (None: a script's own, else unlimited) and how a prompt over
        # it is refused (None: as the script says, else the vendor's own 400).
        self.context_tokens = context_tokens
        self.overflow = overflow
        # The vendors' prompt caches, as each reports them (see prompt_cache.py).
        self.cache = PromptCache(cache_min_tokens)
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
        # Sockets of either front end (asyncio hands out wrappers of its own that can
        # shut down all the same).
        self._connections: set[Any] = set()
        self._connections_opened = 0
        self._stopping = threading.Event()
        self._server: Server | AsyncServer | None = None
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
        address = (self.host, self._wanted_port)
        if self.frontend == "asyncio":
            server: Server | AsyncServer = AsyncServer(address, self)
            serve = server.serve_forever
        else:
            server = Server(address, self)
            # stop() waits up to one poll interval; keep it short so fixtures tear down fast.
            serve = functools.partial(server.serve_forever, poll_interval=0.02)
        self._server = server
        self._thread = threading.Thread(target=serve, name="fake-llm", daemon=True)
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

    def __exit__(self, *exc_info: object) -> None:
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
    def connections_opened(self) -> int:
        """TCP connections clients opened since start or reset_stats() (keep-alive reuses one
        for many requests)."""
        with self._lock:
            return self._connections_opened

    @property
    def in_flight(self) -> int:
        """Requests being served now (a reply the client has read may not have ended yet)."""
        with self._lock:
            return self._in_flight

    def settle(self, quiet_s: float = 0.1, timeout: float = 10) -> None:
        """Wait until no client connection is open and none has opened for `quiet_s`.

        After a client process is killed, a request it sent just before dying may still sit
        unread in a socket; once this returns, every such request has been served (and
        counted). Only meaningful while no live client is talking to the server.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                before = (len(self._connections), self._connections_opened)
            if before[0] == 0:
                time.sleep(quiet_s)
                with self._lock:
                    if (len(self._connections), self._connections_opened) == before:
                        return
            else:
                time.sleep(0.01)
        raise TimeoutError(f"the fake LLM still had clients connected after {timeout:g} s")

    def reset_stats(self) -> None:
        """Forget recorded requests and cached prefixes; the concurrency peak restarts from
        what is in flight."""
        with self._lock:
            self._requests.clear()
            self._max_concurrent = self._in_flight
            self._connections_opened = 0
        self.cache.clear()

    def window(self) -> tuple[int | None, OverflowStyle]:
        """The context window in force and how a prompt over it is refused: the server's
        settings, else the script file's."""
        with self._lock:
            script_fn = self._script_fn
        spec = script_fn.spec if isinstance(script_fn, Script) else None
        window = self.context_tokens or (spec.context_tokens if spec else None)
        style = self.overflow or (spec.overflow if spec else "vendor")
        return window, style

    # -- used by the handler --

    def _reply(self, request: FakeRequest) -> Reply:
        """Ask the script; a script that cannot answer is a 400 or 500."""
        with self._lock:
            script_fn = self._script_fn
        try:
            reply = script_fn(request)
        except NoScenarioMatches as exc:
            raise bad_request(str(exc)) from exc
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

    def _track(self, conn: Any) -> None:
        with self._lock:
            self._connections.add(conn)
            self._connections_opened += 1

    def _untrack(self, conn: Any) -> None:
        with self._lock:
            self._connections.discard(conn)


def run_fake_llm(port: int, script_path: Path, host: str = "127.0.0.1") -> None:
    """Serve `script_path` on host:port until SIGINT or SIGTERM (call from the main thread)."""
    script = Script.load(script_path)
    stop = threading.Event()
    # The asyncio front end: a benchmark's thousand clients must not cost a thousand threads
    # on the machine whose other process is being measured. A script file has no callables
    # that could block its loop.
    server = FakeLLM(script, host=host, port=port, frontend="asyncio")
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
        print(
            f"fake LLM served {len(server.requests)} requests "
            f"over {server.connections_opened} connections",
            file=sys.stderr,
            flush=True,
        )
