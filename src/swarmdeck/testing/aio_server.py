"""The fake LLM's asyncio front end: every connection a task on one event loop.

A thread per connection is what the threaded front end costs: with a thousand concurrent
sessions that is a thousand threads, which on a small machine compete with the process a
benchmark measures. This one serves the same exchanges (exchange.py) from one thread. Its
script runs on the loop: a script callable that blocks holds up every connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

from swarmdeck.testing.answer import HttpError, bad_request
from swarmdeck.testing.backend import Backend
from swarmdeck.testing.exchange import Close, Hangup, Pause, Send, exchange, protocol_error
from swarmdeck.testing.framing import body_length, chunk_size, is_chunked

# As the threaded front end: long enough for any sane head, and a connection idle this long
# is closed rather than held forever.
MAX_HEAD_BYTES = 65536
IDLE_TIMEOUT_S = 60.0
BACKLOG = 2048


class _Malformed(Exception):
    """The bytes on the connection are not an HTTP request we can parse."""


class AsyncServer:
    """Serves a FakeLLM's exchanges on a listening socket from an event loop in a thread."""

    def __init__(self, address: tuple[str, int], fake: Backend) -> None:
        self.fake = fake
        # Bound here so that a busy port fails start() at once, as the threaded one does.
        self.socket = socket.create_server(address, backlog=BACKLOG)
        self.server_address = self.socket.getsockname()
        self._loop = asyncio.new_event_loop()
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None

    def serve_forever(self) -> None:
        """Run the loop until shutdown() (call in the server's own thread)."""
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._connection, sock=self.socket, limit=MAX_HEAD_BYTES)
            )
            self._ready.set()
            self._loop.run_forever()
        finally:
            self._ready.set()
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def shutdown(self) -> None:
        """Stop accepting, end every connection at once, stop the loop (from another
        thread)."""
        self._ready.wait(5)
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop ended on its own
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=5)

    def server_close(self) -> None:
        """Release the listening socket."""
        with contextlib.suppress(OSError):
            self.socket.close()

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop.stop()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: its requests one after another until either side ends it."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        transport = writer.transport
        # drain() returns only once all is handed to the kernel: a hang-up after it loses
        # nothing of what the exchange meant to send.
        transport.set_write_buffer_limits(high=0)
        sock = writer.get_extra_info("socket")
        # Each answer leaves in as few writes as it has pauses; Nagle would hold the last
        # piece back for the client's delayed ACK (~40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.fake._track(sock)
        try:
            while True:
                # An idle connection is closed rather than held forever; a timer is cheaper
                # than wait_for() on every request.
                idle = self._loop.call_later(IDLE_TIMEOUT_S, transport.abort)
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                finally:
                    idle.cancel()
                if not await self._request(head, reader, writer):
                    break
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                await _last_words(writer, protocol_error(self.fake, 400, "incomplete request head"))
        except asyncio.LimitOverrunError:
            await _last_words(writer, protocol_error(self.fake, 431, "request head too large"))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self.fake._untrack(sock)
            self._tasks.discard(task)
            # As the threaded front end: a FIN after what was written, then the socket goes.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            transport.abort()

    async def _request(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Serve one request; False when the connection is to end."""
        arrived = time.monotonic()
        try:
            method, target, version, headers = _parse_head(head)
        except _Malformed as exc:
            await _last_words(writer, protocol_error(self.fake, 400, str(exc)))
            return False
        connection = headers.get("connection", "").lower()
        keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
        if headers.get("expect", "").lower() == "100-continue" and version == "HTTP/1.1":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            body: bytes | HttpError = await _read_body(reader, headers)
        except HttpError as exc:
            body = exc
        steps = exchange(self.fake, method, target, headers, body, arrived)
        try:
            for step in steps:
                if isinstance(step, Send):
                    writer.write(step.data)
                elif isinstance(step, Pause):
                    await writer.drain()
                    await asyncio.sleep(step.seconds)
                elif isinstance(step, Hangup):
                    await writer.drain()
                    return False
                elif isinstance(step, Close):
                    keep_alive = False
        finally:
            steps.close()
        await writer.drain()
        return keep_alive


async def _last_words(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Send an answer the connection ends after, if the client is still there to read it."""
    with contextlib.suppress(OSError):
        writer.write(data)
        await writer.drain()


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """Method, target, version and headers (names lower-cased) of a request head."""
    lines = head.decode("latin-1").split("\r\n")
    words = lines[0].split()
    if len(words) != 3 or not words[2].startswith("HTTP/"):
        raise _Malformed(f"bad request line {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _Malformed(f"bad header line {line[:100]!r}")
        headers[name.lower()] = value.strip()
    return words[0], words[1], words[2], headers


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    """The request body by Content-Length or chunked encoding."""
    if not is_chunked(headers):
        return await reader.readexactly(body_length(headers))
    data = bytearray()
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise bad_request("malformed chunked request body") from None
        size = chunk_size(line, len(data))
        if size == 0:
            while await reader.readline() not in (b"\r\n", b"\n", b""):
                pass
            return bytes(data)
        data += await reader.readexactly(size)
        await reader.readline()
