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
        m = dict(row._mapping)
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
        m = dict(row._mapping)
        m["payload"] = json.loads(m["payload"])
        return cls(**m)


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
    by_model: dict[str, dict[str, Any]] = field(default_factory=dict)

    def tokens(self) -> dict[str, int]:
        """The token counts as the contract prints them."""
        return {
            "input": self.input,
            "output": self.output,
            "reasoning": self.reasoning,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
        }
