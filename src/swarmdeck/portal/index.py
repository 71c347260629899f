"""The portal's shared read of the store: one FleetView for every page, refreshed at most
twice a second however many pages ask, so 10,000 sessions are read once, then only what
changed."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from swarmdeck.views.fleet import Fleet, FleetView, SessionRow
from swarmdeck.views.tree import TreeFilter, TreeLine, tree_lines

PAGE_SIZE = 100
FRESH_S = 0.5


@dataclass
class TreePage:
    """One page of the session tree under a filter."""

    lines: list[TreeLine]
    page: int
    pages: int
    total_lines: int
    sessions: int
    statuses: list[str]


class SessionIndex:
    """Every session's row, kept current by incremental refreshes (thread-safe)."""

    def __init__(self, view: FleetView) -> None:
        self.view = view
        self._fleet: Fleet | None = None
        self._lock = threading.Lock()
        self._read_at = 0.0

    def fleet(self) -> Fleet:
        """The fleet, refreshed if the last read is older than FRESH_S (call off the loop)."""
        with self._lock:
            now = time.monotonic()
            if self._fleet is None:
                self._fleet = self.view.load()
            elif now - self._read_at > FRESH_S:
                self._fleet, _ = self.view.refresh(self._fleet)
            else:
                return self._fleet
            self._read_at = time.monotonic()
            return self._fleet

    def row(self, session_id: str) -> SessionRow | None:
        """One session's row (after a refresh), or None."""
        return self.fleet().rows.get(session_id)

    def tree_page(self, filt: TreeFilter, page: int) -> TreePage:
        """The tree's lines under `filt`, every branch open, PAGE_SIZE lines a page."""
        fleet = self.fleet()
        lines = [line for line in tree_lines(fleet, set(fleet.children), filt) if line.row]
        pages = max(1, -(-len(lines) // PAGE_SIZE))
        page = min(max(1, page), pages)
        start = (page - 1) * PAGE_SIZE
        statuses = sorted({r.status for r in fleet.rows.values()})
        return TreePage(
            lines[start : start + PAGE_SIZE], page, pages, len(lines), len(fleet.rows), statuses
        )
