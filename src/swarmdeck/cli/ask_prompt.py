"""While `run` follows its session: when the model asks the user a question, say how to
answer it, and, when stdin is a terminal, take the answer typed there.

The answer typed goes the way `swarmdeck sessions answer` sends one (the durable inbox),
so an answer from another terminal works too: whichever comes first is taken, and a line
typed after that is refused with the reason. stdin is watched with the event loop's reader,
never a blocked thread, so the run ends as soon as the session does.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import IO, Any

from rich.console import Console
from rich.markup import escape

from swarmdeck.catalog.records import EventRecord
from swarmdeck.errors import SwarmdeckError

ASK_USER = "ask_user"
# How long a typed answer waits for the session to say it waits for one.
QUESTION_WAIT_S = 5.0


class AskUserPrompt:
    """Watches the events a run prints for ask_user calls."""

    def __init__(
        self, host: Any, session_id: str, console: Console, stdin: IO[str] | None = None
    ) -> None:
        self.host = host
        self.session_id = session_id
        self.console = console
        self.stdin = stdin if stdin is not None else sys.stdin
        self._reading = False
        self._pending: set[asyncio.Task[None]] = set()

    def __call__(self, ev: EventRecord) -> None:
        """See one transcript event."""
        if ev.kind != "assistant":
            return
        if any(call["name"] == ASK_USER for call in ev.payload["tool_calls"]):
            self._asked()

    def _asked(self) -> None:
        command = f'swarmdeck sessions answer {self.session_id} "..."'
        if not self._is_tty():
            self.console.print(f"[magenta]the model asks you[/]: answer with `{escape(command)}`")
            return
        self.console.print(
            "[magenta]the model asks you[/]: type your answer and press Enter "
            f"(or answer from elsewhere with `{escape(command)}`)"
        )
        if not self._reading:
            asyncio.get_running_loop().add_reader(self.stdin.fileno(), self._on_line)
            self._reading = True

    def _is_tty(self) -> bool:
        try:
            return self.stdin.isatty()
        except (AttributeError, ValueError):
            return False

    def _on_line(self) -> None:
        line = self.stdin.readline()
        if not line:  # end of input: nothing more will be typed
            self.close()
            return
        text = line.strip()
        if not text:
            return
        self.close()
        task = asyncio.ensure_future(self._send(text))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _send(self, text: str) -> None:
        """Answer, once the session waits for it (the question is stored a moment before
        the session says it waits), then wake it."""
        deadline = time.monotonic() + QUESTION_WAIT_S
        while True:
            try:
                await asyncio.to_thread(self.host.answer, self.session_id, text)
                break
            except SwarmdeckError as exc:
                if time.monotonic() >= deadline:
                    self.console.print(f"[yellow]not sent[/]: {escape(exc.one_line())}")
                    return
            await asyncio.sleep(0.05)
        await self.host.ring(self.session_id)

    def close(self) -> None:
        """Stop watching stdin."""
        if self._reading:
            asyncio.get_running_loop().remove_reader(self.stdin.fileno())
            self._reading = False
