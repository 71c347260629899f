"""A session's transcript as this process knows it: read once, then only what is new.

Turns and tool calls are journaled in the catalog under idempotent keys (`turn:N`,
`tool:N:ID`); this cache answers "is it stored?" and "what does the model see?" without
reading the whole transcript each turn. It is rebuilt from the catalog after a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import EventRecord
from swarmdeck.models.types import Message
from swarmdeck.runtime.history import to_message


@dataclass
class Journal:
    """One session's events, keyed, and the conversation messages they make."""

    session_id: str
    cursor: int = 0
    by_key: dict[str, EventRecord] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)

    def refresh(self, catalog: Catalog) -> None:
        """Take in the events stored since the last refresh (by any process)."""
        self.take(catalog.events(self.session_id, after_id=self.cursor))

    def refresh_with_mail(self, catalog: Catalog, inbox_kinds: list[str], claim: str) -> bool:
        """Refresh, and say in the same round trip whether messages wait in the inbox."""
        fresh, mail = catalog.news(self.session_id, self.cursor, inbox_kinds, claim)
        self.take(fresh)
        return mail

    def take(self, fresh: list[EventRecord]) -> None:
        """Add events read from the catalog, in order."""
        for event in fresh:
            self.by_key[event.key] = event
            message = to_message(event)
            if message is not None:
                self.messages.append(message)
        if fresh:
            self.cursor = max(self.cursor, *(e.id for e in fresh))

    def get(self, key: str) -> EventRecord | None:
        """The stored event with this key, as of the last refresh."""
        return self.by_key.get(key)
