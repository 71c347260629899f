"""The keys that act on the selected session in `swarmdeck tui`: send, answer, cancel and
resume, each through SessionActions off the UI thread, saying how it went."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work

from swarmdeck.runtime.session_actions import ActionResult
from swarmdeck.ui.dialogs import ConfirmDialog, PromptDialog
from swarmdeck.views.fleet import ORPHANED

if TYPE_CHECKING:
    from swarmdeck.ui.app import DeckApp

RESUMABLE = ("failed", ORPHANED)


class SessionKeys:
    """The session actions of DeckApp (a mixin: `self` is the app)."""

    def action_send(self: DeckApp) -> None:
        """Send the selected session a message."""
        sid = self._selected()
        if sid is None:
            return

        def sent(text: str | None) -> None:
            if text:
                self.run_action_in_thread(lambda: self.actions.send(sid, text))

        self.push_screen(
            PromptDialog(f"message to {sid}", "it waits in the inbox until the session reads it"),
            sent,
        )

    def action_answer(self: DeckApp) -> None:
        """Answer the selected session's question."""
        sid = self._selected()
        row = self.fleet.rows.get(sid) if sid and self.fleet else None
        if row is None:
            return
        if not row.needs_me:
            self.notify(
                f"{row.prefix} is not waiting for an answer (it is {row.status})",
                severity="warning",
            )
            return

        def answered(text: str | None) -> None:
            if text:
                self.run_action_in_thread(lambda: self.actions.answer(row.id, text))

        self.push_screen(
            PromptDialog(f"{row.title} asks: {row.question}", f"your answer to {row.id}"), answered
        )

    def action_cancel(self: DeckApp) -> None:
        """Cancel the selected session and everything below it, after a confirmation."""
        sid = self._selected()
        if sid is None or self.fleet is None:
            return
        row = self.fleet.rows[sid]
        if row.stored_status in ("completed", "failed", "cancelled", "budget_exceeded"):
            self.notify(f"{row.prefix} has ended ({row.status})", severity="warning")
            return
        below = [
            r
            for r in self.fleet.descendants(sid)
            if r.stored_status not in ("completed", "failed", "cancelled", "budget_exceeded")
        ]
        message = Text(f"Cancel {row.id} ({row.title})?", style="bold")
        if below:
            message.append(f"\nThese {len(below)} sub-agent(s) go too:")
            for r in below:
                message.append(f"\n  {r.id}  {r.status}  {r.title}")
        else:
            message.append("\nNo live sub-agent is below it.")

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.notify(f"cancelling {row.prefix}…")
                self.run_action_in_thread(lambda: self.actions.cancel(sid))

        self.push_screen(ConfirmDialog(message), confirmed)

    def action_resume(self: DeckApp) -> None:
        """Resume a failed or orphaned session in a process of its own."""
        sid = self._selected()
        row = self.fleet.rows.get(sid) if sid and self.fleet else None
        detail = self.followed.detail if self.followed else None
        if row is None or detail is None:
            return
        if row.status not in RESUMABLE:
            self.notify(
                f"only a failed or orphaned session is resumed ({row.prefix} is {row.status})",
                severity="warning",
            )
            return
        self.run_action_in_thread(lambda: self.actions.resume(sid, Path(detail.record.run_dir)))

    @work(thread=True, group="actions")
    def run_action_in_thread(self: DeckApp, act: Callable[[], ActionResult]) -> None:
        """Run an action off the UI thread and say how it went."""
        try:
            result = act()
        except Exception as exc:  # shown, never a crash of the screen
            result = ActionResult(False, f"{type(exc).__name__}: {exc}")
        self.call_from_thread(
            self.notify, result.message, severity="information" if result.ok else "error"
        )
