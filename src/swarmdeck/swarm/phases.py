"""The coordinator's steps: plain functions the driver runs as durable steps.

Each may run again after a crash (at-least-once), so each writes under an idempotent key in
the coordinator's transcript (kind `swarm`: `swarm:start`, `swarm:plan`,
`swarm:spawn:I:A`, `swarm:end:I:A`, `swarm:result`) and returns what is stored when it
finds it there: a plan is accepted once, a member session is created once, an outcome is
classified once.
"""

from __future__ import annotations

import time
from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.runtime.origin import FROM_PARENT_KEY
from swarmdeck.runtime.services import services
from swarmdeck.swarm.spec import SPEC_OPTION, SwarmSpec
from swarmdeck.tools.builtins.memory import MEMORY_TOOL_NAMES

SUBMIT_PLAN = "submit_plan"


SUBMIT_RESULT = "submit_result"


EVENT_KIND = "swarm"


# What every member may use besides its mode's tools: the swarm's messages and blackboard.
SWARM_TOOLS = ("message_agent", "broadcast", *MEMORY_TOOL_NAMES)


# The coordinator's own inputs (a nudge, the aggregate message) come from no person.
OWN_INPUT_KEY = f"{FROM_PARENT_KEY}swarm:"


def swarm_spec(record: SessionRecord) -> SwarmSpec:
    return SwarmSpec.from_options(record.options[SPEC_OPTION])


def stored_in(catalog: Any, session_id: str, key: str) -> dict[str, Any] | None:
    event = catalog.event_by_key(session_id, key)
    return event.payload if event is not None else None


def append_entry(session_id: str, key: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Store a swarm entry once; returns the stored one (the first writer's)."""
    catalog = services().catalog
    if not catalog.append_event(session_id, key, EVENT_KIND, payload):
        stored = stored_in(catalog, session_id, key)
        assert stored is not None
        return stored
    return payload


def stored_entry(session_id: str, key: str) -> dict[str, Any] | None:
    """A swarm entry an earlier generation stored (`swarm:plan`, `swarm:result`), or None."""
    return stored_in(services().catalog, session_id, key)


def ended_sessions(session_ids: list[str]) -> list[str]:
    """Those of these sessions that have ended."""
    catalog = services().catalog
    return [sid for sid in session_ids if catalog.get_session(sid).terminal]


def mark_start(session_id: str) -> float:
    """When the swarm started (stored once: its timeout counts from there)."""
    return float(
        append_entry(session_id, "swarm:start", {"phase": "start", "at": time.time()})["at"]
    )


def record_swarm_result(session_id: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Store the swarm's verdict and merged result (`swarm:result`, and the session's
    result); returns the stored one."""
    stored = append_entry(session_id, "swarm:result", {"phase": "result", **doc, "at": time.time()})
    services().catalog.update_session(
        session_id, result={k: v for k, v in stored.items() if k != "phase"}
    )
    return stored
