"""What a person does to sessions from the TUI or the web portal, through the same calls
as the CLI: Host.send, Host.answer and Host.cancel_offline in this process, none of which
starts the engine here; resume as a `swarmdeck sessions resume` process, which runs the
session (and its logging) away from the screen and outlives the TUI or the portal."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.errors import UsageError

if TYPE_CHECKING:
    from swarmdeck.runtime.host import Host


@dataclass
class ActionResult:
    """What an action did, in a line for the person who asked."""

    ok: bool
    message: str


class SessionActions:
    """Send, answer, cancel and resume one session at a time (call off the UI thread)."""

    def __init__(self, host: Host | None = None) -> None:
        self._host = host

    @property
    def host(self) -> Host:
        """A host that never launches the engine here: it only stores and rings."""
        if self._host is None:
            from swarmdeck.runtime.host import Host

            self._host = Host()
        return self._host

    def send(self, session_id: str, text: str) -> ActionResult:
        """Deliver a message (kept until a worker runs the session if none does now)."""
        return self._deliver(session_id, text, "message", self.host.send)

    def answer(self, session_id: str, text: str) -> ActionResult:
        """Answer the session's ask_user question; a session no live process runs (its
        process ended, as the demo's does) is resumed in a process of its own to take it."""
        return self._deliver(session_id, text, "answer", self.host.answer, resume=True)

    def _deliver(
        self,
        session_id: str,
        text: str,
        what: str,
        post: Callable[[str, str], bool],
        resume: bool = False,
    ) -> ActionResult:
        if not text.strip():
            return ActionResult(False, f"the {what} is empty; nothing was sent")
        try:
            post(session_id, text)
        except UsageError as exc:
            return ActionResult(False, exc.one_line())
        delivered = f"{what} delivered to {session_id}"
        if self._served(session_id):
            return ActionResult(True, delivered)
        if resume and self._orphaned(session_id):
            record = self.host.catalog.get_session(session_id)
            return ActionResult(
                True, f"{delivered}; {self.resume(session_id, Path(record.run_dir)).message}"
            )
        return ActionResult(True, f"{delivered} (no worker runs it now: it reads it when one does)")

    def _orphaned(self, session_id: str) -> bool:
        record = self.host.catalog.get_session(session_id)
        return session_id in WorkerRegistry(self.host.catalog.engine).orphaned([record])

    def _served(self, session_id: str) -> bool:
        record = self.host.catalog.get_session(session_id)
        return any(w.executor_id == record.executor for w in self.host.fleet_workers())

    def cancel(self, session_id: str) -> ActionResult:
        """Cancel the session and every sub-agent below it (Host.cancel_offline: the same
        tree as `swarmdeck sessions cancel`, with no engine started here)."""
        try:
            cancelled = self.host.cancel_offline(session_id)
        except UsageError as exc:
            return ActionResult(False, exc.one_line())
        if not cancelled:
            return ActionResult(False, f"{session_id} had already ended; nothing was cancelled")
        return ActionResult(True, f"cancelled {len(cancelled)} session(s): {', '.join(cancelled)}")

    def resume(self, session_id: str, log_dir: Path) -> ActionResult:
        """Resume a failed or orphaned session in a process of its own
        (`swarmdeck sessions resume`), which outlives the TUI; its output goes to a log."""
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / "resume.log"
        with log.open("ab") as out:
            subprocess.Popen(
                [sys.executable, "-m", "swarmdeck", "sessions", "resume", session_id],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        return ActionResult(True, f"resuming {session_id} (log: {log})")
