"""Following one session: its transcript entries after a cursor (sd_events ids) and its
status, for `sessions tail` and the TUI's transcript pane."""

from __future__ import annotations

from dataclasses import dataclass

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import TERMINAL_STATUSES, EventRecord


@dataclass
class SessionFollower:
    """Reads what is new in one session since the last look."""

    catalog: Catalog
    session_id: str
    cursor: int = 0
    status: str = "pending"

    def poll(self) -> list[EventRecord]:
        """The events stored since the last poll (and the status now, in `status`)."""
        # The status first: once it reads ended, the events read after it are the last.
        self.status = self.catalog.get_session(self.session_id).status
        events = self.catalog.events(self.session_id, after_id=self.cursor)
        if events:
            self.cursor = max(self.cursor, *(e.id for e in events))
        return events

    @property
    def ended(self) -> bool:
        """True once the session can no longer change."""
        return self.status in TERMINAL_STATUSES
