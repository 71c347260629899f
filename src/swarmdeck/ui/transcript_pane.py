"""The selected session's transcript, followed live: one node per entry, a tool call's
arguments and result folded under it (enter opens one)."""

from __future__ import annotations

import datetime as dt

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from swarmdeck.catalog.records import RESUMED_KIND
from swarmdeck.views.transcript import Entry

KIND_STYLE = {
    "task": ("task", "bold"),
    "user": ("you", "bold cyan"),
    "model": ("model", "green"),
    "call": ("tool", "yellow"),
    "result": ("result", "dim"),
    "child_update": ("child", "cyan"),
    "timer": ("timer", "cyan"),
    "notice": ("wait", "bold yellow"),
    "compaction": ("context", "blue"),
    "budget": ("budget", "bold yellow"),
    "note": ("note", "yellow"),
    RESUMED_KIND: ("resumed", "bold yellow"),
    "status": ("status", "bold"),
    "error": ("error", "bold red"),
    "audit": ("audit", "magenta"),
}
# Lines of a body shown under its entry; the rest is a line that says how many more.
BODY_LINES = 200


def clock_of(ts: float) -> str:
    """A time of day as the transcript shows it."""
    return dt.datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def entry_label(entry: Entry) -> Text:
    """One entry's head line: its time, what it is, and a line of it."""
    word, style = KIND_STYLE.get(entry.kind, (entry.kind, ""))
    if entry.kind == "call" and entry.error:
        style = "bold red"
    elif entry.kind == "call" and not entry.done:
        word = "tool…"
    label = Text(clock_of(entry.ts) + " ", style="dim")
    label.append(word.ljust(8), style=style)
    label.append(entry.head)
    return label


class TranscriptPane(Tree[Entry]):
    """A live transcript; its nodes are the entries, their leaves the folded bodies."""

    DEFAULT_CSS = "TranscriptPane { height: 1fr; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__("transcript", **kwargs)  # type: ignore[arg-type]
        self.show_root = False
        self.guide_depth = 2
        self.session_id: str | None = None
        self._entry_nodes: dict[int, TreeNode[Entry]] = {}

    def show_session(self, session_id: str | None, entries: list[Entry]) -> None:
        """Start over with another session's entries."""
        self.clear()
        self._entry_nodes = {}
        self.session_id = session_id
        self.add_entries(entries)

    def add_entries(self, entries: list[Entry]) -> None:
        """Add new entries, or update those that changed (a call whose result came)."""
        follow = self.cursor_line < 0 or self.cursor_line >= self.last_line - 1
        for entry in entries:
            node = self._entry_nodes.get(id(entry))
            if node is None:
                node = self.root.add(entry_label(entry), data=entry, allow_expand=entry.foldable)
                self._entry_nodes[id(entry)] = node
            else:
                node.set_label(entry_label(entry))
                node.remove_children()
                node.allow_expand = entry.foldable
            lines = entry.body.splitlines()
            for line in lines[:BODY_LINES]:
                node.add_leaf(Text(line or " "))
            if len(lines) > BODY_LINES:
                node.add_leaf(Text(f"… {len(lines) - BODY_LINES} more lines", style="dim"))
        if follow and entries:
            self.scroll_end(animate=False)
