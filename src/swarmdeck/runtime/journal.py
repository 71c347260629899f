"""A session's transcript as this process knows it: read once, then only what is new.

Turns and tool calls are journaled in the catalog under idempotent keys (`turn:N`,
`tool:N:ID`); this cache answers "is it stored?" and "what does the model see?" without
reading the whole transcript each turn. It is rebuilt from the catalog after a restart.

It also derives, from what is stored and nothing else, the skills the session loaded (a
load_skill call whose result is stored) and the inputs that will start its next turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import EventRecord
from swarmdeck.models.types import Message
from swarmdeck.runtime.history import to_message
from swarmdeck.runtime.origin import input_origin, turn_origin
from swarmdeck.tools.builtins.skills import LOAD_SKILL


@dataclass
class Journal:
    """One session's events, keyed, and the conversation messages they make."""

    session_id: str
    cursor: int = 0
    by_key: dict[str, EventRecord] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    # Skill name -> the turn whose load_skill call loaded it.
    loaded: dict[str, int] = field(default_factory=dict)
    _skill_calls: dict[str, str] = field(default_factory=dict)
    # Inputs (kind, key) since the model's last turn, and that turn's origin.
    _inputs: list[tuple[str, str]] = field(default_factory=list)
    _last_origin: str | None = None

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
            self._follow(event)
        if fresh:
            self.cursor = max(self.cursor, *(e.id for e in fresh))

    def _follow(self, event: EventRecord) -> None:
        """Keep the loaded skills and the pending inputs up to date."""
        if event.kind == "assistant":
            self._inputs.clear()
            self._last_origin = event.payload.get("origin")
            turn = event.key.removeprefix("turn:")
            for c in event.payload.get("tool_calls", []):
                if c["name"] == LOAD_SKILL:
                    name = _skill_name(c["arguments"])
                    if name:
                        self._skill_calls[f"{turn}:{c['id']}"] = name
        elif event.kind == "tool_result":
            if event.payload.get("name") == LOAD_SKILL and not event.payload.get("is_error"):
                call_key = event.key.removeprefix("tool:")
                name = self._skill_calls.pop(call_key, None)
                if name is not None:
                    self.loaded.setdefault(name, int(call_key.split(":", 1)[0]))
        else:
            self._inputs.append((event.kind, event.key))

    def skills_before(self, turn: int) -> list[str]:
        """The skills loaded by turns before `turn` (what turn `turn` is offered)."""
        return [name for name, at in self.loaded.items() if at < turn]

    def next_origin(self, *, has_parent: bool, system: bool) -> str:
        """The origin of the turn the model is about to take."""
        inputs = [
            origin
            for kind, key in self._inputs
            if (origin := input_origin(kind, key, has_parent=has_parent, system=system))
        ]
        return turn_origin(inputs, self._last_origin)

    def get(self, key: str) -> EventRecord | None:
        """The stored event with this key, as of the last refresh."""
        return self.by_key.get(key)


def _skill_name(arguments: str) -> str | None:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return None
    name = args.get("name") if isinstance(args, dict) else None
    return name if isinstance(name, str) else None
