"""Which blackboard a session reads and writes: its swarm's, its tree's or the store's."""

from __future__ import annotations

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.errors import UsageError
from swarmdeck.memory.blackboard import Scope

SCOPES = ("swarm", "tree", "store")
STORE_SCOPE_ID = "*"


def scope_for(record: SessionRecord, kind: str | None) -> Scope:
    """The scope `kind` names for this session; by default its swarm's when it is in one,
    else its tree's. Asking for a swarm's outside one is refused, not widened."""
    if kind is not None and kind not in SCOPES:
        raise UsageError(f"unknown scope {kind!r}", f"use one of: {', '.join(SCOPES)}")
    group = record.group
    if kind is None:
        kind = "swarm" if group else "tree"
    if kind == "swarm":
        if group is None:
            raise UsageError(
                f"session {record.id} is not in a swarm, so it has no swarm blackboard",
                "use scope tree (this session tree's) or store (shared by every session)",
            )
        return Scope("swarm", group)
    if kind == "tree":
        return Scope("tree", record.root_id)
    return Scope("store", STORE_SCOPE_ID)
