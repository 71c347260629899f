"""A session's transcript as this process knows it: read once, then only what is new.

Turns and tool calls are journaled in the catalog under idempotent keys (`turn:N`,
`tool:N:ID`); this cache answers "is it stored?" and "what does the model see?" without
reading the whole transcript each turn. It is rebuilt from the catalog after a restart.

It also derives, from what is stored and nothing else, the skills the session loaded (a
load_skill call whose result is stored), the inputs that will start its next turn, and what
the model sees once older turns were compacted (view): the task, the compaction's summary
with the loaded skills and pinned messages it replaced, verbatim, then every message after
it. The catalog keeps every message; only the view leaves them out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import COMPACT_REQUEST_KIND, CONTEXT_NOTE_KIND, EventRecord
from swarmdeck.models.types import Message
from swarmdeck.runtime.history import to_message
from swarmdeck.runtime.origin import input_origin, turn_origin
from swarmdeck.tools.builtins.skills import LOAD_SKILL
from swarmdeck.tools.tool_index import LOAD_TOOLS

# The transcript kind of a compaction: older turns replaced, in what the model sees, by a
# summary (or a marker that they were dropped).
COMPACTION = "compaction"


@dataclass
class Journal:
    """One session's events, keyed, and the conversation messages they make."""

    session_id: str
    cursor: int = 0
    by_key: dict[str, EventRecord] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    # Per message: the key and kind of the event it came from, and whether it is pinned.
    sources: list[tuple[str, str, bool]] = field(default_factory=list)
    # The latest compaction (its event), and the model's last turn.
    compaction: EventRecord | None = None
    # The key of a person's request to compact now (`sessions compact`) that no compaction
    # (or note that there is nothing to compact) has answered yet.
    asked: str | None = None
    last_turn: EventRecord | None = None
    # Skill name -> the stored result of the load_skill call that loaded it (its body).
    skill_bodies: dict[str, tuple[str, str]] = field(default_factory=dict)
    _position: dict[str, int] = field(default_factory=dict)
    # Skill name -> the turn whose load_skill call loaded it.
    loaded: dict[str, int] = field(default_factory=dict)
    _skill_calls: dict[str, str] = field(default_factory=dict)
    # Tool name -> the turn whose load_tools call loaded it, in the order they were loaded.
    tools_loaded: dict[str, int] = field(default_factory=dict)
    _tool_calls: dict[str, list[str]] = field(default_factory=dict)
    # Inputs (kind, key) since the model's last turn, and that turn's origin.
    _inputs: list[tuple[str, str]] = field(default_factory=list)
    _last_origin: str | None = None

    def refresh(self, catalog: Catalog) -> None:
        """Take in the events stored since the last refresh (by any process)."""
        self.take(catalog.events(self.session_id, after_id=self.cursor))

    def refresh_with_mail(
        self, catalog: Catalog, inbox_kinds: list[str] | None, claim: str
    ) -> bool:
        """Refresh, and say in the same round trip whether messages (of these kinds; None:
        of any) wait in the inbox."""
        fresh, mail = catalog.news(self.session_id, self.cursor, inbox_kinds, claim)
        self.take(fresh)
        return mail

    def take(self, fresh: list[EventRecord]) -> None:
        """Add events read from the catalog, in order."""
        for event in fresh:
            self.by_key[event.key] = event
            message = to_message(event)
            if message is not None:
                self._position[event.key] = len(self.messages)
                self.messages.append(message)
                self.sources.append((event.key, event.kind, bool(event.payload.get("pinned"))))
            elif event.kind == COMPACTION:
                self.compaction = event
            self._follow_requests(event)
            self._follow(event)
        if fresh:
            self.cursor = max(self.cursor, *(e.id for e in fresh))

    def _follow_requests(self, event: EventRecord) -> None:
        """Keep the pending request to compact up to date."""
        if event.kind == COMPACT_REQUEST_KIND:
            self.asked = event.key
        elif event.kind in (COMPACTION, CONTEXT_NOTE_KIND):
            answered = self.asked is not None and event.payload.get("answers") == self.asked
            self.asked = None if answered else self.asked

    def _follow(self, event: EventRecord) -> None:
        """Keep the loaded skills and the pending inputs up to date."""
        if event.kind == COMPACTION:
            return
        if event.kind == "assistant":
            self.last_turn = event
            self._inputs.clear()
            self._last_origin = event.payload.get("origin")
            turn = event.key.removeprefix("turn:")
            for c in event.payload.get("tool_calls", []):
                if c["name"] == LOAD_SKILL:
                    name = _skill_name(c["arguments"])
                    if name:
                        self._skill_calls[f"{turn}:{c['id']}"] = name
                elif c["name"] == LOAD_TOOLS:
                    self._tool_calls[f"{turn}:{c['id']}"] = _tool_names(c["arguments"])
        elif event.kind == "tool_result":
            if not event.payload.get("is_error"):
                self._loaded_by(event)
        else:
            self._inputs.append((event.kind, event.key))

    def _loaded_by(self, event: EventRecord) -> None:
        """What a load_skill or load_tools call that succeeded loaded."""
        call_key = event.key.removeprefix("tool:")
        turn = int(call_key.split(":", 1)[0])
        if event.payload.get("name") == LOAD_SKILL:
            name = self._skill_calls.pop(call_key, None)
            if name is not None:
                self.loaded.setdefault(name, turn)
                self.skill_bodies.setdefault(name, (event.key, event.payload["content"]))
        elif event.payload.get("name") == LOAD_TOOLS:
            for name in self._tool_calls.pop(call_key, []):
                self.tools_loaded.setdefault(name, turn)

    def tools_before(self, turn: int) -> list[str]:
        """The tools loaded by turns before `turn`, in the order they were loaded."""
        return [name for name, at in self.tools_loaded.items() if at < turn]

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

    def cut(self) -> int:
        """Where what the model sees verbatim begins: the index of the first message after
        the latest compaction (when there was none, the first message past the task)."""
        if self.compaction is None:
            return 1 if self.sources and self.sources[0][1] == "task" else 0
        return self._position[self.compaction.payload["through"]] + 1

    def view(self) -> list[Message]:
        """The conversation as the model sees it (see the module's docstring)."""
        if self.compaction is None:
            return list(self.messages)
        cut = self.cut()
        head = [
            m
            for m, (_, kind, _) in zip(self.messages[:cut], self.sources, strict=False)
            if kind == "task"
        ]
        pinned = [
            m
            for m, (_, kind, pin) in zip(self.messages[:cut], self.sources, strict=False)
            if pin and kind != "task"
        ]
        return [*head, Message("user", self.summary_text()), *pinned, *self.messages[cut:]]

    def summary_text(self) -> str:
        """The latest compaction's text, with the loaded skills it replaced, verbatim."""
        assert self.compaction is not None
        text = self.compaction.payload["text"]
        cut = self.cut()
        skills = [
            (name, body)
            for name, (key, body) in self.skill_bodies.items()
            if self._position.get(key, cut) < cut
        ]
        if skills:
            text += "\n\nSkills you loaded earlier (verbatim):" + "".join(
                f"\n\n## {name}\n{body}" for name, body in skills
            )
        return text

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


def _tool_names(arguments: str) -> list[str]:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return []
    names = args.get("names") if isinstance(args, dict) else None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
