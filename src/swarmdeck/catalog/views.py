"""Sessions as the JSON documents every reader prints: `sessions ls --json`, `sessions show
--json` and the MCP server's session tools (one shape for all of them)."""

from __future__ import annotations

from typing import Any

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import SessionRecord


def session_summary(s: SessionRecord) -> dict[str, Any]:
    """A session in one object: identity, status, where and when."""
    return {
        "id": s.id,
        "parent_id": s.parent_id,
        "status": s.status,
        "mode": s.mode,
        "model": s.model,
        "workdir": s.workdir,
        "title": s.title,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
    }


def session_document(catalog: Catalog, s: SessionRecord, events: bool = True) -> dict[str, Any]:
    """A session with its task, result, usage and (unless `events` is False) transcript."""
    usage = catalog.usage_totals([s.id])
    doc: dict[str, Any] = {
        **session_summary(s),
        "task": s.task,
        "result": s.result,
        "final_text": s.final_text,
        "error": s.error,
        "usage": {
            "turns": usage.turns,
            **usage.tokens(),
            "estimated_turns": usage.estimated_turns,
            "cost_usd": usage.cost_usd,
        },
    }
    if events:
        doc["events"] = [
            {"seq": e.seq, "kind": e.kind, "payload": e.payload} for e in catalog.events(s.id)
        ]
    return doc
