"""Sessions as the JSON documents every reader prints: `sessions ls --json`, `sessions show
--json` and the MCP server's session tools (one shape for all of them)."""

from __future__ import annotations

from typing import Any

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import EventRecord, SessionRecord

# A status derived, never stored: a live session whose worker died and that no one has taken
# over yet (the stored status is what the session last did).
ORPHANED = "orphaned"


def session_summary(s: SessionRecord, orphaned: bool = False) -> dict[str, Any]:
    """A session in one object: identity, status, where and when."""
    return {
        "id": s.id,
        "parent_id": s.parent_id,
        "status": ORPHANED if orphaned else s.status,
        "mode": s.mode,
        "model": s.model,
        "workdir": s.workdir,
        "title": s.title,
        "created_at": s.created_at,
        "updated_at": s.updated_at,
    }


def orphaned_ids(
    catalog: Catalog, hostname: str, lease_seconds: float, rows: list[SessionRecord]
) -> set[str]:
    """Of these sessions, those whose worker died and that no one has taken over yet."""
    from swarmdeck.catalog.workers import WorkerRegistry

    registry = WorkerRegistry(catalog.engine, hostname, lease_seconds)
    return registry.orphaned([r for r in rows if not r.terminal])


def context_summary(events: list[EventRecord]) -> dict[str, object] | None:
    """What the last turn's prompt measured (its tokens, the window, the runtime's own
    tokens) and how often older turns were compacted; None before any measured turn."""
    last = next(
        (e for e in reversed(events) if e.kind == "assistant" and e.payload.get("context")), None
    )
    if last is None:
        return None
    compactions = [e for e in events if e.kind == "compaction"]
    return {
        **last.payload["context"],
        "compactions": len(compactions),
        "dropped": sum(1 for e in compactions if not e.payload.get("summarized")),
    }


def session_document(
    catalog: Catalog, s: SessionRecord, events: bool = True, orphaned: bool = False
) -> dict[str, Any]:
    """A session with its task, result, usage, context and (unless `events` is False)
    transcript."""
    usage = catalog.usage_totals([s.id])
    transcript = catalog.events(s.id)
    doc: dict[str, Any] = {
        **session_summary(s, orphaned),
        "task": s.task,
        "result": s.result,
        "final_text": s.final_text,
        "error": s.error,
        "usage": {
            "turns": usage.turns,
            **usage.tokens(),
            "estimated_turns": usage.estimated_turns,
            "cost_usd": usage.cost_usd,
            "cache_share": usage.cache_share,
        },
        "context": context_summary(transcript),
    }
    if events:
        doc["events"] = [{"seq": e.seq, "kind": e.kind, "payload": e.payload} for e in transcript]
    return doc
