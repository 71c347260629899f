"""Every session of the store as one row each, followed cheaply: the first load reads the
store once, each refresh only what the event cursor and `updated_at` say changed."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.liveness import WorkerRow
from swarmdeck.catalog.overview import Overview, StoreMarks
from swarmdeck.catalog.records import (
    BUDGET_WARNED_OPTION,
    EventRecord,
    SessionRecord,
    UsageTotals,
)
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.views.figures import TokenFigures
from swarmdeck.views.prefixes import shortest_prefixes
from swarmdeck.views.text import one_line

# Derived at read time, never stored: a live session whose worker died and that nobody has
# taken over yet (WorkerRegistry.orphaned), unless it waits for a person (see shown_status).
ORPHANED = "orphaned"
NEEDS_ME = "input_required"


def shown_status(stored: str, unheld: bool) -> str:
    """The status every surface shows (sessions ls and show, the TUI, status): the stored
    one, or `orphaned` for a live session no process holds. A session waiting for a
    person's answer is not lost when none holds it: its answer waits in its inbox and
    resumes it (the TUI's answer does), so it stays `input_required`, "needs you"."""
    return ORPHANED if unheld and stored != NEEDS_ME else stored


def worker_label(executor: str | None) -> str:
    """An executor id without its random tail (`host-pid`), for a narrow column."""
    return executor.rsplit("-", 1)[0] if executor else ""


@dataclass
class SessionRow:
    """One session as a watcher sees it."""

    id: str
    prefix: str
    parent_id: str | None
    root_id: str
    depth: int
    status: str  # as shown: see shown_status
    stored_status: str
    title: str
    task: str
    agent: str | None
    model: str
    mode: str
    workdir: str
    system: bool
    worker: str | None
    created_at: float
    updated_at: float
    turns: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    estimated: bool = False
    # When a waiting session's timer, or an idle one's cron, fires next (epoch seconds).
    wake_at: float | None = None
    # The question of a session waiting for an answer.
    question: str | None = None
    error: str | None = None
    # A swarm's coordinator (issue 13) sets this; the tree shows it as a badge.
    swarm: str | None = None
    # No live process holds it (WorkerRegistry.orphaned): shown as `orphaned` unless it
    # needs you, which then says that no worker reads the answer until one runs it.
    unheld: bool = False
    # A budget covering it is 80 % spent ("max_tokens 82%"): runtime/budget.py warned it.
    budget_warning: str | None = None

    @property
    def needs_me(self) -> bool:
        """True while the session waits for a person's answer, even with no worker to run
        it now (unheld): the answer waits in its inbox until one does."""
        return self.stored_status == NEEDS_ME

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.tokens_in + self.tokens_out

    def seconds_left(self, now: float) -> float | None:
        """Seconds until its timer or cron fires (None without one)."""
        return None if self.wake_at is None else max(0.0, self.wake_at - now)

    def summary(self) -> dict[str, object]:
        """The row as JSON for `sessions ls --json`."""
        return {
            "id": self.id,
            "prefix": self.prefix,
            "parent_id": self.parent_id,
            "root_id": self.root_id,
            "status": self.status,
            "title": self.title,
            "task": self.task,
            "agent": self.agent,
            "model": self.model,
            "mode": self.mode,
            "workdir": self.workdir,
            "system": self.system,
            "worker": self.worker,
            "turns": self.turns,
            "tokens": {"input": self.tokens_in, "output": self.tokens_out},
            "cost_usd": self.cost_usd,
            "wake_at": self.wake_at,
            "question": self.question,
            "budget_warning": self.budget_warning,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


def _pending_call(last: EventRecord | None, name: str) -> dict[str, object] | None:
    """The arguments of the last turn's call to `name`, or None."""
    if last is None:
        return None
    for call in reversed(last.payload.get("tool_calls") or []):
        if call.get("name") == name:
            try:
                args = json.loads(call.get("arguments") or "{}")
            except json.JSONDecodeError:
                return {}
            return args if isinstance(args, dict) else {}
    return None


def _warned(record: SessionRecord) -> str | None:
    """What the budget warning on a session says, if it got one."""
    what = record.options.get(BUDGET_WARNED_OPTION)
    return what if isinstance(what, str) and what else None


def swarm_badge(record: SessionRecord) -> str | None:
    """What marks a swarm's coordinator (issue 13: mode `swarm`, its spec in
    options["swarm"]): its team's name, or "swarm"; None for any other session."""
    spec = record.options.get("swarm")
    if record.mode != "swarm" and not isinstance(spec, dict):
        return None
    team = spec.get("team") if isinstance(spec, dict) else None
    name = team.get("name") if isinstance(team, dict) else None
    return name if isinstance(name, str) and name else "swarm"


def build_row(
    record: SessionRecord,
    prefix: str,
    usage: UsageTotals | None,
    orphaned: bool,
    last_turn: EventRecord | None = None,
) -> SessionRow:
    """One session's row from its record, usage and (when it waits) its last model turn."""
    usage = usage or UsageTotals()
    row = SessionRow(
        id=record.id,
        prefix=prefix,
        parent_id=record.parent_id,
        root_id=record.root_id,
        depth=record.depth,
        status=shown_status(record.status, orphaned),
        stored_status=record.status,
        title=one_line(record.title or record.task),
        task=record.task,
        agent=record.agent,
        model=record.model,
        mode=record.mode,
        workdir=record.workdir,
        system=record.system,
        worker=record.executor,
        created_at=record.created_at,
        updated_at=record.updated_at,
        turns=usage.turns,
        tokens_in=TokenFigures.of(usage).input,
        tokens_out=usage.output,
        cost_usd=usage.cost_usd,
        estimated=bool(usage.estimated_turns),
        error=record.error,
        swarm=swarm_badge(record),
        unheld=orphaned,
        budget_warning=_warned(record),
    )
    if record.status == "waiting":
        wait = _pending_call(last_turn, "wait")
        if wait is not None and isinstance(wait.get("seconds"), int | float):
            # The status is set as the wait starts: its deadline is that moment plus seconds.
            row.wake_at = record.updated_at + float(wait["seconds"])
    elif record.status == "idle":
        cron = record.options.get("cron")
        if isinstance(cron, dict) and isinstance(cron.get("next_at"), int | float):
            row.wake_at = float(cron["next_at"])
    elif record.status == NEEDS_ME:
        ask = _pending_call(last_turn, "ask_user")
        if ask is not None:
            row.question = str(ask.get("question", ""))
    return row


@dataclass
class Fleet:
    """Every session's row at one moment, the workers, and the marks they were read at."""

    rows: dict[str, SessionRow]
    workers: dict[str, WorkerRow]
    alive: set[str]
    marks: StoreMarks
    read_at: float
    children: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index()

    def index(self) -> None:
        """Rebuild the parent -> children map (oldest child first)."""
        children: dict[str, list[str]] = {}
        for row in sorted(self.rows.values(), key=lambda r: (r.created_at, r.id)):
            if row.parent_id is not None and row.parent_id in self.rows:
                children.setdefault(row.parent_id, []).append(row.id)
        self.children = children

    def roots(self) -> list[SessionRow]:
        """Sessions without a parent in the store, newest first."""
        return sorted(
            (r for r in self.rows.values() if r.parent_id is None or r.parent_id not in self.rows),
            key=lambda r: (-r.created_at, r.id),
        )

    def descendants(self, session_id: str) -> list[SessionRow]:
        """Every session below this one, depth first."""
        found: list[SessionRow] = []
        stack = list(reversed(self.children.get(session_id, [])))
        while stack:
            sid = stack.pop()
            found.append(self.rows[sid])
            stack.extend(reversed(self.children.get(sid, [])))
        return found

    def newest(self, limit: int, status: str | None = None) -> list[SessionRow]:
        """Up to `limit` rows, newest first, of this (shown) status."""
        rows = (r for r in self.rows.values() if status is None or r.status == status)
        return sorted(rows, key=lambda r: (-r.created_at, r.id))[:limit]


class FleetView:
    """Reads the fleet from the store and keeps it current."""

    def __init__(self, catalog: Catalog, registry: WorkerRegistry) -> None:
        self.catalog = catalog
        self.overview = Overview(catalog)
        self.registry = registry
        self._prefixes: dict[str, str] | None = None

    def load(self) -> Fleet:
        """Every session, read now."""
        marks = self.overview.marks()
        records = self.overview.sessions()
        workers, alive = self._workers()
        prefixes = shortest_prefixes(r.id for r in records)
        rows = self._rows(records, prefixes)
        return Fleet(rows, workers, alive, marks, time.time())

    def refresh(self, fleet: Fleet) -> tuple[Fleet, set[str]]:
        """The fleet brought up to date, and the ids whose row changed (read again: those
        with new transcript entries or a newer update; everything after a removal)."""
        marks = self.overview.marks()
        workers, alive = self._workers()
        changed: set[str] = set()
        if marks != fleet.marks:
            changed = self.overview.touched_since(
                fleet.marks.last_event_id, fleet.marks.last_update
            )
        # A worker that died changes no session row, only what its sessions show.
        if alive != fleet.alive:
            changed |= {r.id for r in fleet.rows.values() if r.worker is not None}
        if not changed and marks.sessions == len(fleet.rows):
            fleet.marks, fleet.workers, fleet.alive = marks, workers, alive
            fleet.read_at = time.time()
            return fleet, set()
        records = self.overview.sessions(changed)
        rows = dict(fleet.rows)
        known = set(rows)
        rows.update(self._rows(records, {r.id: r.id for r in records}))
        if len(rows) != marks.sessions:
            # Sessions were removed: read everything again (rare, and still one pass).
            fresh = self.load()
            return fresh, set(fresh.rows) | known
        prefixes = shortest_prefixes(rows) if set(rows) != known else None
        for sid, row in rows.items():
            prefix = prefixes[sid] if prefixes else fleet.rows[sid].prefix
            if row.prefix != prefix:
                rows[sid] = dataclasses.replace(row, prefix=prefix)
                changed.add(sid)
        return Fleet(rows, workers, alive, marks, time.time()), changed

    def prefixes(self) -> dict[str, str]:
        """Every session's shortest unique prefix."""
        if self._prefixes is None:
            self._prefixes = shortest_prefixes(self.overview.all_ids())
        return self._prefixes

    def newest(self, limit: int, status: str | None = None) -> list[SessionRow]:
        """Up to `limit` rows, newest first, of this status as shown (`orphaned` too),
        reading only those sessions (and every id, for the prefixes)."""
        if status == ORPHANED:
            live = [s for s in self.catalog.list_sessions(limit=10**9) if not s.terminal]
            rows = self._rows(live, self.prefixes())
            return [r for r in rows.values() if r.status == ORPHANED][:limit]
        records = self.catalog.list_sessions(status=status, limit=limit)
        return list(self._rows(records, self.prefixes()).values())

    def _workers(self) -> tuple[dict[str, WorkerRow], set[str]]:
        rows = {w.executor_id: w for w in self.registry.rows()}
        return rows, {w for w, row in rows.items() if self.registry.is_alive(row)}

    def _rows(
        self,
        records: list[SessionRecord],
        prefixes: dict[str, str],
    ) -> dict[str, SessionRow]:
        if not records:
            return {}
        usage = self.overview.usage(None if len(records) > 500 else [r.id for r in records])
        orphaned = self.registry.orphaned(records)
        rows: dict[str, SessionRow] = {}
        for rec in records:
            last = None
            if rec.status in ("waiting", NEEDS_ME):
                last = self.catalog.last_event(rec.id, ["assistant"])
            rows[rec.id] = build_row(
                rec, prefixes[rec.id], usage.get(rec.id), rec.id in orphaned, last
            )
        return rows
