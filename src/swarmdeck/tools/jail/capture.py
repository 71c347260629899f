"""A command's combined output, kept within a byte budget: its head and its tail."""

from __future__ import annotations

import asyncio

# How long to wait for the last output once a command has ended (a grandchild that escaped
# its process group can hold the pipe open forever), and for a killed command's end.
DRAIN_GRACE_S = 1.0
REAP_GRACE_S = 5.0

READ_CHUNK = 65_536


class Capture:
    """Keeps the head and the tail of a stream within a byte budget."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap - cap // 2
        self.tail_cap = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.tail_cap)]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + self.tail.decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        note = f"\n[... output truncated: {omitted} of {self.total} bytes omitted ...]\n"
        return head + note + self.tail.decode("utf-8", errors="replace")


async def pump(stream: asyncio.StreamReader, capture: Capture) -> None:
    """Feed `capture` all `stream` holds, to its end."""
    while chunk := await stream.read(READ_CHUNK):
        capture.feed(chunk)
