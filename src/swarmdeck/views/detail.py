"""One session in full, for `sessions show` and the TUI's inspector: its record, usage
against its budget, the context its last turn measured, its artifacts and its worker."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.overview import Overview
from swarmdeck.catalog.records import EventRecord, SessionRecord, UsageTotals
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.views.fleet import SessionRow, build_row
from swarmdeck.views.prefixes import shortest_prefixes

# What an inspector shows of an artifact before a person asks for the whole of it.
PREVIEW_BYTES = 4000
# The options that cap a session (see runtime/budget.py BUDGET_KEYS and max_turns).
BUDGET_OPTIONS = ("max_turns", "max_turns_total", "max_tokens", "max_cost")


@dataclass
class ArtifactView:
    """One artifact's metadata and where to read it."""

    session_id: str
    name: str
    path: str
    size: int
    sha256: str
    ts: float

    @property
    def link(self) -> str:
        """Its artifact:// link."""
        return f"artifact://{self.session_id}/{self.name}"

    def read(self, limit: int | None = PREVIEW_BYTES) -> str:
        """Its text (the first `limit` bytes), or a line saying why there is none."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(limit if limit is not None else -1)
        except OSError as exc:
            return f"(cannot read {self.path}: {exc.strerror})"
        if b"\0" in data:
            return f"(binary, {self.size} bytes)"
        text = data.decode("utf-8", errors="replace")
        if limit is not None and self.size > limit:
            text += f"\n… ({self.size - limit} more bytes)"
        return text


@dataclass
class WorkerView:
    """The executor that runs (or ran) a session."""

    executor_id: str
    hostname: str | None = None
    pid: int | None = None
    role: str | None = None
    alive: bool = False
    heartbeat_age_s: float | None = None


@dataclass
class SessionDetail:
    """Everything about one session that a person inspects."""

    row: SessionRow
    record: SessionRecord
    usage: UsageTotals
    budget: dict[str, Any]
    context: dict[str, Any] | None
    artifacts: list[ArtifactView]
    worker: WorkerView | None
    events: list[EventRecord] = field(default_factory=list)
    descendants: list[str] = field(default_factory=list)

    def document(self, events: bool = True) -> dict[str, Any]:
        """The session as JSON for `sessions show --json` and the MCP server's session tools:
        its row, result, usage, budget, context, artifacts and (with `events`) transcript."""
        usage = self.usage
        doc: dict[str, Any] = {
            **self.row.summary(),
            "result": self.record.result,
            "final_text": self.record.final_text,
            "error": self.record.error,
            "usage": {
                "turns": usage.turns,
                **usage.tokens(),
                "estimated_turns": usage.estimated_turns,
                "cost_usd": usage.cost_usd,
                "cache_share": usage.cache_share,
            },
            "budget": self.budget,
            "context": self.context,
            "artifacts": [a.link for a in self.artifacts],
        }
        if events:
            doc["events"] = [
                {"seq": e.seq, "kind": e.kind, "payload": e.payload} for e in self.events
            ]
        return doc


def context_summary(events: list[EventRecord]) -> dict[str, Any] | None:
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


def context_line(context: dict[str, Any]) -> str:
    """The context summary as one line: prompt against window, the runtime's tokens."""
    runtime: Any = context["runtime"]
    own = runtime["system"] + runtime["tools"]
    compacted = f" · compacted {context['compactions']}x" if context["compactions"] else ""
    project = runtime.get("project") or 0  # turns stored before the figure existed: none
    docs = f" · project instructions {project}" if project else ""
    return (
        f"context: last prompt {context['prompt_tokens']} of {context['window']} tokens "
        f"({context['tokenizer']}){compacted} · runtime per turn {own}: system prompt "
        f"{runtime['system']} (skill index {runtime['skills']}), tool schemas "
        f"{runtime['tools']}{docs}"
    )


def worker_view(registry: WorkerRegistry, executor: str | None) -> WorkerView | None:
    """The session's executor as the registry knows it (None when it has none)."""
    if executor is None:
        return None
    row = registry.get(executor)
    if row is None:
        return WorkerView(executor)
    return WorkerView(
        executor,
        row.hostname,
        row.pid,
        row.role,
        registry.is_alive(row),
        round(time.time() - row.heartbeat_at, 1),
    )


def session_detail(
    catalog: Catalog,
    registry: WorkerRegistry,
    session_id: str,
    *,
    with_events: bool = True,
    prefix: str | None = None,
) -> SessionDetail:
    """One session read now (its id resolved already); its shortest unique prefix is
    worked out from every id unless the caller knows it."""
    record = catalog.get_session(session_id)
    events = catalog.events(session_id) if with_events else []
    last_turn = next((e for e in reversed(events) if e.kind == "assistant"), None)
    if not with_events and record.status in ("waiting", "input_required"):
        last_turn = catalog.last_event(session_id, ["assistant"])
    usage = catalog.usage_totals([session_id])
    if prefix is None:
        prefix = shortest_prefixes(Overview(catalog).all_ids()).get(session_id, session_id)
    orphaned = session_id in registry.orphaned([record])
    row = build_row(record, prefix, usage, orphaned, last_turn)
    artifacts = [
        ArtifactView(a["session_id"], a["name"], a["path"], a["size"], a["sha256"], a["ts"])
        for a in catalog.artifacts_of([session_id])
    ]
    budget = {k: record.options[k] for k in BUDGET_OPTIONS if k in record.options}
    return SessionDetail(
        row=row,
        record=record,
        usage=usage,
        budget=budget,
        context=context_summary(events) if events else None,
        artifacts=artifacts,
        worker=worker_view(registry, record.executor),
        events=events,
        descendants=catalog.descendant_ids(session_id),
    )
