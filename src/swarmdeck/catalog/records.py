"""Plain records the catalog returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

STATUSES = (
    "pending",
    "running",
    "waiting",
    "idle",
    "input_required",
    "completed",
    "failed",
    "cancelled",
    "budget_exceeded",
)
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled", "budget_exceeded"})
# The transcript entry a rerun of a session's execution starts with (a crash, a restart, a
# takeover by another worker): who runs it now, and who ran it before.
RESUMED_KIND = "resumed"
# A budget 80 % spent (runtime/budget.py): the record in its owner's transcript, the note in
# each warned session's conversation, and the option marking a warned session's row.
BUDGET_WARNING_KIND = "budget_warning"
BUDGET_NOTE_KIND = "budget_note"
BUDGET_WARNED_OPTION = "budget_warning"
# A person's request to compact a session now (`sessions compact`): its inbox kind, which
# the session journals when it takes it; and what the session says of its context when it
# does not compact (nothing to compact, or the storm guard holds: runtime/context.py).
COMPACT_REQUEST_KIND = "compact"
CONTEXT_NOTE_KIND = "context_note"
# A system agent runs under `sys-<its id>`, once per store.
SYSTEM_SESSION_PREFIX = "sys-"
# The option naming the group (a swarm) a session belongs to: the id of the session at its
# head, set on the head and on the members (its children) alike.
GROUP_OPTION = "group"


def system_session_id(agent_id: str) -> str:
    """The session id of the system agent with this id."""
    return f"{SYSTEM_SESSION_PREFIX}{agent_id}"


@dataclass
class SessionRecord:
    """One row of the sessions table."""

    id: str
    parent_id: str | None
    root_id: str
    depth: int
    agent: str | None
    model: str
    mode: str
    workdir: str
    run_dir: str
    status: str
    title: str | None
    task: str
    system_message: str | None
    tool_names: list[str] | None
    options: dict[str, Any]
    result: Any
    final_text: str | None
    error: str | None
    generation: int
    created_at: float
    updated_at: float
    executor: str | None = None
    epoch: int = 0
    active_at: float | None = None

    @property
    def terminal(self) -> bool:
        """True once the session can no longer change."""
        return self.status in TERMINAL_STATUSES

    @property
    def system(self) -> bool:
        """True for a system agent's session (by its options, or by its id: fail closed)."""
        return bool(self.options.get("system_agent")) or self.id.startswith(SYSTEM_SESSION_PREFIX)

    @property
    def group(self) -> str | None:
        """The group (swarm) this session belongs to, or None."""
        group = self.options.get(GROUP_OPTION)
        return str(group) if group else None

    @classmethod
    def from_row(cls, row: Any) -> SessionRecord:
        """Build from a SQLAlchemy row mapping."""
        return cls.from_mapping(dict(row._mapping))

    @classmethod
    def from_mapping(cls, m: dict[str, Any]) -> SessionRecord:
        """Build from a row as a dict of its columns."""
        m = dict(m)
        m["tool_names"] = json.loads(m["tool_names"]) if m["tool_names"] else None
        m["options"] = json.loads(m["options"] or "{}")
        m["result"] = json.loads(m["result"]) if m["result"] else None
        return cls(**m)


@dataclass
class EventRecord:
    """One transcript entry."""

    id: int
    session_id: str
    seq: int
    key: str
    kind: str
    payload: dict[str, Any]
    ts: float

    @classmethod
    def from_row(cls, row: Any) -> EventRecord:
        """Build from a SQLAlchemy row mapping."""
        return cls.from_mapping(dict(row._mapping))

    @classmethod
    def from_mapping(cls, m: dict[str, Any]) -> EventRecord:
        """Build from a row as a dict of its columns."""
        return cls(**{**m, "payload": json.loads(m["payload"])})


@dataclass
class InboxItem:
    """One message delivered to a session."""

    id: int
    msg_id: str
    kind: str
    payload: dict[str, Any]


@dataclass
class InboxPost:
    """A message to put in a session's inbox (once per msg_id)."""

    session_id: str
    msg_id: str
    kind: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Delivery:
    """What became of a message for a live session: `fresh` when it was stored now (not
    when its msg_id was delivered before); `ended`, the session's final status when it
    had ended (nothing was stored)."""

    fresh: bool
    ended: str | None = None


@dataclass(frozen=True)
class EndWrite:
    """A session's end as the store writes it: its entry under `key`, its row's new
    columns, and the notice for its parent's inbox (None: a root)."""

    key: str
    entry: dict[str, Any]
    notice: InboxPost | None
    fields: dict[str, Any]


@dataclass(frozen=True)
class TurnWrite:
    """A model turn as the store writes it: its entry, its usage row, when it was taken."""

    key: str
    payload: dict[str, Any]
    usage_row: dict[str, Any]
    ts: float


def estimated_note(estimated_turns: int, turns: int) -> str:
    """How far counts over `turns` turns are estimates, as a suffix for humans."""
    if not estimated_turns:
        return ""
    return " (estimated)" if estimated_turns >= turns else " (partly estimated)"


@dataclass
class UsageTotals:
    """Usage summed over turns."""

    turns: int = 0
    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float | None = None
    # Turns whose counts were estimated (the provider reported none).
    estimated_turns: int = 0
    by_model: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, row: Any) -> None:
        """Count one turn's usage row (anything with the usage table's columns as attributes
        or keys)."""
        get = row.get if isinstance(row, dict) else lambda name: getattr(row, name)
        self.turns += 1
        for name in ("input", "output", "reasoning", "cache_read", "cache_write"):
            setattr(self, name, getattr(self, name) + get(name))
        cost = get("cost_usd")
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost
        estimated = int(bool(get("estimated")))
        self.estimated_turns += estimated
        per_model = self.by_model.setdefault(
            f"{get('provider')}:{get('model')}",
            {
                "turns": 0,
                "input": 0,
                "output": 0,
                "cache_read": 0,
                "cache_write": 0,
                "cost_usd": None,
                "estimated_turns": 0,
            },
        )
        per_model["turns"] += 1
        for name in ("input", "output", "cache_read", "cache_write"):
            per_model[name] += get(name)
        per_model["estimated_turns"] += estimated
        if cost is not None:
            per_model["cost_usd"] = (per_model["cost_usd"] or 0.0) + cost

    @property
    def estimated_note(self) -> str:
        """ " (estimated)" when these counts are estimates, " (partly estimated)" when some
        turns' are, "" when every provider reported them."""
        return estimated_note(self.estimated_turns, self.turns)

    @property
    def cache_share(self) -> float | None:
        """The share of input tokens a prompt cache served (None before any input)."""
        return cache_share(self.input, self.cache_read, self.cache_write)

    def tokens(self) -> dict[str, int]:
        """The token counts as the contract prints them."""
        # The same five counts as models.types.Usage.as_dict: the catalog sits below models
        # and cannot import it (the models engineer owns that side of the pair).
        return {
            "input": self.input,
            "output": self.output,
            "reasoning": self.reasoning,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
        }


def cache_share(uncached: int, read: int, written: int) -> float | None:
    """Cached input tokens over all input tokens (None when there were none)."""
    total = uncached + read + written
    return read / total if total else None
