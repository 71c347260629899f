"""The sweeper's tools: find session trees that may go, remove one whole (rows, files, run
directories, engine history), prune the engine's history of ended runs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from swarmdeck.catalog.housekeeping import (
    forget_generations,
    session_briefs,
    transcript_footprint,
)
from swarmdeck.errors import PermissionDeniedError
from swarmdeck.tools.base import Effect, Tool, ToolContext, ToolOutcome
from swarmdeck.tools.builtins.mgmt.audit import audit_line, write_audit
from swarmdeck.tools.builtins.mgmt.files import remove_tree, tree_size
from swarmdeck.tools.builtins.mgmt.guards import Forest, grace_seconds
from swarmdeck.tools.builtins.mgmt.ops import EngineRun, HistoryRemoved, MgmtOps

MGMT_MODES = frozenset({"agent"})
# Ended engine runs that make a scan wake the sweeper to prune.
PRUNE_AT = 3
DEFAULT_PRUNE_MINUTES = 60.0
DEFAULT_KEEP = 3


def ops(ctx: ToolContext) -> MgmtOps:
    """The runtime's engine operations for maintenance."""
    found = ctx.services.get("mgmt_ops")
    if found is None:
        raise PermissionDeniedError("maintenance needs the engine; this process runs none")
    return found


async def forest(ctx: ToolContext) -> Forest:
    """Every session of the store, indexed (read off the loop)."""
    return Forest.of(await asyncio.to_thread(session_briefs, ctx.services["catalog"]))


class ScanArgs(BaseModel):
    """Find session trees that may be removed."""

    grace_minutes: float = Field(5, ge=0, description="Ended at least this long ago.")
    include_orphans: bool = Field(True, description="Also sub-agents whose parent is gone.")


class CleanupArgs(BaseModel):
    """Remove one session tree."""

    session_id: str
    reason: str = Field("", description="Why, for the audit.")


class PruneArgs(BaseModel):
    """Prune the engine's history."""

    older_than_minutes: float = Field(DEFAULT_PRUNE_MINUTES, ge=0)
    keep_executions: int = Field(DEFAULT_KEEP, ge=1, description="Runs kept for each live session.")


def prunable(
    runs: list[EngineRun], sessions: Forest, older_than_s: float, keep: int, now: float
) -> list[EngineRun]:
    """Ended runs whose history nobody needs: of sessions removed or ended, and the older
    generations of live ones (their last `keep` stay). Never a live session's current run."""
    out = []
    for run in runs:
        if now - run.updated_at < older_than_s:
            continue
        brief = sessions.by_id.get(run.session_id)
        if brief is None or brief.terminal or run.generation <= brief.generation - keep:
            out.append(run)
    return out


async def _scan(ctx: ToolContext, args: ScanArgs) -> ToolOutcome:
    grace_s = grace_seconds(ctx, args.grace_minutes)
    found = await forest(ctx)
    now = time.time()
    units = found.removable(grace_s, args.include_orphans, now)
    runs = await ops(ctx).ended_runs()
    old = prunable(runs, found, grace_s, DEFAULT_KEEP, now)
    lines = []
    for sid in units:
        b = found.by_id[sid]
        size = len(found.subtree(sid))
        kind = "orphan" if b.parent_id and b.parent_id not in found.by_id else "tree"
        lines.append(
            f"- {sid} {b.status}, ended {(now - b.updated_at) / 60:.0f} min ago, "
            f"{size} session(s), {kind}"
        )
    head = (
        f"{len(units)} session tree(s) may be removed (grace {grace_s / 60:g} min)"
        if units
        else f"nothing to remove (grace {grace_s / 60:g} min)"
    )
    prune = f"engine history: {len(old)} ended run(s) nobody needs"
    if len(old) >= PRUNE_AT:
        prune += " - call prune_orchestrations"
    quiet = not units and len(old) < PRUNE_AT
    return ToolOutcome("\n".join([head, *lines, prune]), quiet=quiet)


async def _cleanup(ctx: ToolContext, args: CleanupArgs) -> str:
    settings = ctx.services["settings"]
    catalog = ctx.services["catalog"]
    grace_s = grace_seconds(ctx)
    found = await forest(ctx)
    if args.session_id not in found.by_id:
        return f"{args.session_id} is not in the store (already removed?)"
    why = found.refusal(args.session_id, grace_s)
    if why is not None:
        raise PermissionDeniedError(f"refused: {why}")
    ids = found.subtree(args.session_id)
    briefs = [found.by_id[i] for i in ids]
    rows, transcript_bytes = await asyncio.to_thread(transcript_footprint, catalog, ids)
    folders = [settings.artifacts_dir / i for i in ids]
    folders += _run_dirs(briefs, settings.runs_dir)
    file_bytes = sum(tree_size(f)[1] for f in folders)
    runs = ops(ctx).runs_of({b.id: b.generation for b in briefs})
    history: HistoryRemoved = await ops(ctx).history_size(runs)
    what: dict[str, Any] = {
        "session": args.session_id,
        "sessions": ids,
        "transcript_rows": rows,
        "engine_runs": history.runs,
        "bytes": transcript_bytes + file_bytes + history.bytes,
    }
    entry = write_audit(ctx, "cleanup_session", args.reason or "stale session tree", what)
    removed = await ops(ctx).delete_runs(runs)
    await asyncio.to_thread(catalog.delete_session_tree, args.session_id)
    for folder in folders:
        root = settings.runs_dir if folder.parent == settings.runs_dir else settings.artifacts_dir
        remove_tree(folder, root)
    return (
        f"removed {args.session_id} and {len(ids) - 1} descendant(s): {rows} transcript "
        f"rows, {what['bytes']} bytes, {removed.runs} engine run(s) ({removed.steps} steps)"
        f"\n{audit_line(entry)}"
    )


def _run_dirs(briefs: list[Any], runs_dir: Path) -> list[Path]:
    """The run directories these sessions own: a run dir named after one of them (a
    sub-agent shares its root's)."""
    ids = {b.id for b in briefs}
    out = []
    for b in briefs:
        path = Path(b.run_dir)
        if path.name in ids and path.parent == runs_dir and path not in out:
            out.append(path)
    return out


async def _prune(ctx: ToolContext, args: PruneArgs) -> str:
    catalog = ctx.services["catalog"]
    older_s = max(60.0 * args.older_than_minutes, grace_seconds(ctx))
    found = await forest(ctx)
    runs = await ops(ctx).ended_runs()
    old = prunable(runs, found, older_s, args.keep_executions, time.time())
    if not old:
        return "nothing to prune"
    ids = [r.workflow_id for r in old]
    size = await ops(ctx).history_size(ids)
    what = {
        "runs": len(old),
        "sessions": sorted({r.session_id for r in old}),
        "steps": size.steps,
        "bytes": size.bytes,
    }
    entry = write_audit(ctx, "prune_orchestrations", "engine history nobody needs", what)
    removed = await ops(ctx).delete_runs(ids)
    await asyncio.to_thread(
        forget_generations, catalog, [(r.session_id, r.generation) for r in old]
    )
    return (
        f"pruned {removed.runs} engine run(s) of {len(what['sessions'])} session(s): "
        f"{removed.steps} steps, about {size.bytes} bytes\n{audit_line(entry)}"
    )


SWEEPER_TOOLS = [
    Tool(
        "scan_completed_sessions",
        "List session trees that may be removed (all ended past the grace period, no system "
        "session), and how much engine history could be pruned.",
        ScanArgs,
        Effect.READ,
        _scan,
        modes=MGMT_MODES,
        granted=True,
    ),
    Tool(
        "cleanup_session",
        "Remove a session tree: sessions, transcripts, artifacts, run directories and engine "
        "history. Refuses system, live and recently ended sessions.",
        CleanupArgs,
        Effect.IDEMPOTENT,
        _cleanup,
        modes=MGMT_MODES,
        granted=True,
    ),
    Tool(
        "prune_orchestrations",
        "Delete the engine's history of ended sessions and of old generations of live ones.",
        PruneArgs,
        Effect.IDEMPOTENT,
        _prune,
        modes=MGMT_MODES,
        granted=True,
    ),
]
