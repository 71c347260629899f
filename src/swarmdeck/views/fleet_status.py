"""The fleet at a glance, for `swarmdeck workers` and the portal's fleet page: the live
executors grouped by host, the sessions each runs, the hand-over queue, takeovers in the
last hour and the spend per model since midnight; for the TUI's fleet view, the sessions
each executor holds."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.overview import Overview
from swarmdeck.catalog.records import SessionRecord
from swarmdeck.catalog.supervisors import SupervisorRegistry
from swarmdeck.catalog.workers import WorkerRegistry

TAKEOVER_WINDOW_S = 3600


def fleet_status(catalog: Catalog, registry: WorkerRegistry) -> dict[str, Any]:
    """The live executors (fleet workers and local runs), their sessions, the queue."""
    running = catalog.running_by_executor()
    depth, untaken = catalog.queue_depth()
    now = time.time()
    workers = [
        {
            "hostname": w.hostname,
            "pid": w.pid,
            "executor_id": w.executor_id,
            "role": w.role,
            "heartbeat_age_s": round(now - w.heartbeat_at, 1),
            "sessions_running": running.get(w.executor_id, 0),
        }
        for w in sorted(registry.alive(), key=lambda w: (w.role != "worker", w.started_at))
    ]
    supervisors = [
        {
            "supervisor_id": s.supervisor_id,
            "hostname": s.hostname,
            "pid": s.pid,
            "processes": s.processes,
        }
        for s in SupervisorRegistry(catalog.engine).rows(live_within_s=registry.lease_s * 3)
    ]
    return {
        "workers": workers,
        "queue_depth": depth,
        "waiting_for_a_worker": untaken,
        "supervisors": supervisors,
    }


@dataclass
class HostView:
    """One machine of the fleet and the executors it runs."""

    hostname: str
    workers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def sessions_running(self) -> int:
        """Sessions its executors run now."""
        return sum(w["sessions_running"] for w in self.workers)


@dataclass
class FleetSummary:
    """What the portal's fleet page shows."""

    hosts: list[HostView]
    queue_depth: int
    waiting_for_a_worker: int
    takeovers_last_hour: list[dict[str, Any]]
    spend_today: dict[str, dict[str, Any]]
    spend_today_usd: float | None


def midnight(now: float | None = None) -> float:
    """Today's local midnight, as epoch seconds."""
    today = dt.datetime.fromtimestamp(now or time.time()).date()
    return dt.datetime.combine(today, dt.time()).timestamp()


def fleet_summary(catalog: Catalog, registry: WorkerRegistry) -> FleetSummary:
    """The fleet read now: hosts with their workers, the queue, takeovers and today's spend."""
    doc = fleet_status(catalog, registry)
    hosts: dict[str, HostView] = {}
    for w in doc["workers"]:
        hosts.setdefault(w["hostname"], HostView(w["hostname"])).workers.append(w)
    since = time.time() - TAKEOVER_WINDOW_S
    takeovers = [
        {
            "executor_id": w.executor_id,
            "hostname": w.hostname,
            "by": w.recovered_by,
            "at": w.recovered_at,
        }
        for w in registry.taken_over_since(since)
    ]
    usage = catalog.usage_totals(since=midnight())
    return FleetSummary(
        hosts=sorted(hosts.values(), key=lambda h: h.hostname),
        queue_depth=doc["queue_depth"],
        waiting_for_a_worker=doc["waiting_for_a_worker"],
        takeovers_last_hour=sorted(takeovers, key=lambda t: -(t["at"] or 0)),
        spend_today=dict(sorted(usage.by_model.items())),
        spend_today_usd=usage.cost_usd,
    )


def held_sessions(catalog: Catalog, summary: FleetSummary) -> dict[str, list[SessionRecord]]:
    """The sessions not yet ended that each executor of the summary holds, oldest first:
    the leaves of the TUI's fleet view (hosts, their workers, the sessions each runs)."""
    executors = {w["executor_id"] for host in summary.hosts for w in host.workers}
    held: dict[str, list[SessionRecord]] = {e: [] for e in executors}
    for record in Overview(catalog).sessions(catalog.live_session_ids()):
        if record.executor in held:
            held[record.executor].append(record)
    for records in held.values():
        records.sort(key=lambda r: r.created_at)
    return held
