"""Read-only views of the store for the operator and the resource manager: sessions,
storage, the database, the workers; and `check_resources`, the resource manager's cron
check, which says only what crosses a threshold."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from swarmdeck.catalog.housekeeping import (
    artifact_paths,
    database_size,
    session_briefs,
    table_stats,
)
from swarmdeck.catalog.supervisors import SupervisorRegistry
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.tools.base import Effect, Tool, ToolContext, ToolOutcome
from swarmdeck.tools.builtins.mgmt.files import tree_size
from swarmdeck.tools.builtins.mgmt.sweeper import MGMT_MODES

# An artifact file younger than this may be one whose catalog row is being written.
ORPHAN_MIN_AGE_S = 600.0
# What check_resources flags.
THRESHOLDS = {
    "orphaned_files": 1,
    "events_rows": 50_000,
    "wal_bytes": 64 * 2**20,
    "database_bytes": 500 * 2**20,
}


class NoArgs(BaseModel):
    """No arguments."""


def rss_bytes(pid: int) -> int | None:
    """Resident memory of a process on this host (Linux), or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def system_stats(ctx: ToolContext) -> dict[str, Any]:
    """Sessions by status, system sessions, roots and sub-agents, workers alive."""
    catalog = ctx.services["catalog"]
    briefs = session_briefs(catalog)
    by_status = Counter(b.status for b in briefs)
    return {
        "sessions": len(briefs),
        "by_status": dict(sorted(by_status.items())),
        "live": sum(1 for b in briefs if not b.terminal),
        "roots": sum(1 for b in briefs if b.parent_id is None),
        "sub_agents": sum(1 for b in briefs if b.parent_id is not None),
        "system_sessions": {b.id: b.status for b in briefs if b.system},
        "workers_alive": len(_workers(ctx).alive()),
    }


def orphaned_files(ctx: ToolContext, now: float | None = None) -> list[Path]:
    """Artifact files the catalog no longer knows (old enough not to be mid-write)."""
    root: Path = ctx.services["settings"].artifacts_dir
    if not root.is_dir():
        return []
    known = artifact_paths(ctx.services["catalog"])
    now = time.time() if now is None else now
    out = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.is_symlink() or str(path) in known:
            continue
        try:
            age = now - path.stat().st_mtime
        except OSError:
            continue
        if age >= ORPHAN_MIN_AGE_S:
            out.append(path)
    return out


def storage_stats(ctx: ToolContext) -> dict[str, Any]:
    """Bytes and files of the home and its parts, and the orphaned artifact files."""
    settings = ctx.services["settings"]
    out: dict[str, Any] = {}
    for name, path in (
        ("home", settings.home),
        ("artifacts", settings.artifacts_dir),
        ("runs", settings.runs_dir),
        ("worktrees", settings.worktrees_dir),
    ):
        files, size = tree_size(path)
        out[name] = {"path": str(path), "files": files, "bytes": size}
    ids = {b.id for b in session_briefs(ctx.services["catalog"])}
    runs = settings.runs_dir
    foreign = (
        [p.name for p in runs.iterdir() if p.is_dir() and p.name not in ids]
        if runs.is_dir()
        else []
    )
    out["runs"]["not_of_a_session"] = len(foreign)  # fanouts, or sessions removed by hand
    orphans = orphaned_files(ctx)
    out["orphaned_artifact_files"] = {
        "files": len(orphans),
        "bytes": sum(p.stat().st_size for p in orphans if p.exists()),
    }
    return out


def database_stats(ctx: ToolContext) -> dict[str, Any]:
    """Rows and bytes per table, and the store's size (WAL or connections)."""
    catalog = ctx.services["catalog"]
    return {"store": database_size(catalog), "tables": table_stats(catalog)}


def infrastructure_stats(ctx: ToolContext) -> dict[str, Any]:
    """Workers (host, pid, heartbeat age, memory), hosts, supervisors."""
    catalog = ctx.services["catalog"]
    registry = _workers(ctx)
    now, here = time.time(), registry.hostname
    workers = []
    for w in registry.rows():
        alive = w.alive(now, here, registry.lease_s)
        workers.append(
            {
                "executor_id": w.executor_id,
                "host": w.hostname,
                "pid": w.pid,
                "alive": alive,
                "heartbeat_age_s": round(now - w.heartbeat_at, 1),
                "rss_bytes": rss_bytes(w.pid) if alive and w.hostname == here else None,
            }
        )
    sups = [
        {**dataclasses.asdict(s), "live": s.live(now, registry.lease_s)}
        for s in SupervisorRegistry(catalog.engine).rows(stopped_too=True)
    ]
    return {
        "workers": workers,
        "hosts": sorted({w["host"] for w in workers if w["alive"]}),
        "supervisors": sups,
        "this_process": {"pid": os.getpid(), "rss_bytes": rss_bytes(os.getpid())},
    }


def _workers(ctx: ToolContext) -> WorkerRegistry:
    """The worker registry, with this process's host name and lease."""
    settings = ctx.services.get("settings")
    if settings is None:
        return WorkerRegistry(ctx.services["catalog"].engine)
    return WorkerRegistry(ctx.services["catalog"].engine, settings.hostname, settings.lease_seconds)


def resource_alerts(ctx: ToolContext) -> list[str]:
    """What crosses a threshold now."""
    alerts = []
    orphans = orphaned_files(ctx)
    if len(orphans) >= THRESHOLDS["orphaned_files"]:
        alerts.append(f"{len(orphans)} orphaned artifact file(s): purge_orphaned_blobs")
    catalog = ctx.services["catalog"]
    tables = {t["table"]: t for t in table_stats(catalog)}
    events = tables.get("sd_events", {}).get("rows", 0)
    if events > THRESHOLDS["events_rows"]:
        alerts.append(f"sd_events holds {events} rows: purge_old_events")
    store = database_size(catalog)
    if (store.get("wal_bytes") or 0) > THRESHOLDS["wal_bytes"]:
        alerts.append(f"the WAL holds {store['wal_bytes']} bytes")
    if (store.get("bytes") or 0) > THRESHOLDS["database_bytes"]:
        alerts.append(f"the database holds {store['bytes']} bytes")
    crashed = _workers(ctx).crashed()
    if crashed:
        alerts.append(f"{len(crashed)} worker(s) died and nobody took over: {', '.join(crashed)}")
    return alerts


def _json_tool(name: str, description: str, fn: Any) -> Tool:
    async def body(ctx: ToolContext, _args: NoArgs) -> str:
        return json.dumps(await asyncio.to_thread(fn, ctx), ensure_ascii=False, default=str)

    return Tool(name, description, NoArgs, Effect.READ, body, modes=MGMT_MODES, granted=True)


async def _check(ctx: ToolContext, _args: NoArgs) -> ToolOutcome:
    alerts = await asyncio.to_thread(resource_alerts, ctx)
    if not alerts:
        return ToolOutcome("all resources within their thresholds", quiet=True)
    return ToolOutcome("\n".join(f"- {a}" for a in alerts))


STATS_TOOLS = [
    _json_tool(
        "get_system_stats",
        "Sessions by status, system sessions, roots and sub-agents, workers alive.",
        system_stats,
    ),
    _json_tool(
        "get_storage_stats",
        "Bytes of the home, artifacts, run directories, worktrees; orphaned artifact files.",
        storage_stats,
    ),
    _json_tool(
        "get_database_stats",
        "Rows and bytes per table; WAL size (SQLite) or connections (PostgreSQL).",
        database_stats,
    ),
    _json_tool(
        "get_infrastructure_stats",
        "Workers, hosts, heartbeat ages, memory; worker supervisors.",
        infrastructure_stats,
    ),
    Tool(
        "check_resources",
        "What crosses a threshold now (orphaned files, a large events table, WAL or "
        "database, dead workers); nothing when all is well.",
        NoArgs,
        Effect.READ,
        _check,
        modes=MGMT_MODES,
        granted=True,
    ),
]
