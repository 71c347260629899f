"""The resource manager's purges: old transcripts of ended sessions, orphaned artifact
files, and compaction of the database (on a person's request only)."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, Field

from swarmdeck.catalog.housekeeping import (
    compact,
    database_size,
    purge_consumed_inbox,
    purge_transcripts,
)
from swarmdeck.tools.base import Effect, Tool, ToolContext
from swarmdeck.tools.builtins.mgmt.audit import audit_line, write_audit
from swarmdeck.tools.builtins.mgmt.guards import grace_seconds, require_person
from swarmdeck.tools.builtins.mgmt.stats import orphaned_files
from swarmdeck.tools.builtins.mgmt.sweeper import MGMT_MODES, forest


class PurgeEventsArgs(BaseModel):
    """Purge old transcripts."""

    older_than_minutes: float = Field(1440, ge=0, description="Of sessions ended this long ago.")
    reason: str = Field("", description="Why, for the audit.")


class PurgeBlobsArgs(BaseModel):
    """Delete orphaned artifact files."""

    confirm: bool = Field(False, description="False: only say what would go.")
    reason: str = ""


class CompactArgs(BaseModel):
    """Compact the database."""

    reason: str = ""


async def _purge_events(ctx: ToolContext, args: PurgeEventsArgs) -> str:
    catalog = ctx.services["catalog"]
    older_s = max(60.0 * args.older_than_minutes, grace_seconds(ctx))
    cutoff = time.time() - older_s
    found = await forest(ctx)
    ids = [
        b.id for b in found.by_id.values() if b.terminal and not b.system and b.updated_at <= cutoff
    ]
    what = {"sessions": len(ids), "older_than_minutes": older_s / 60}
    entry = write_audit(ctx, "purge_old_events", args.reason or "old transcripts", what)
    rows, size = await asyncio.to_thread(purge_transcripts, catalog, ids)
    inbox_rows, inbox_size = await asyncio.to_thread(purge_consumed_inbox, catalog, cutoff)
    return (
        f"purged {rows} transcript rows of {len(ids)} ended session(s) and {inbox_rows} "
        f"delivered messages: {size + inbox_size} bytes (their records, results and final "
        f"texts stay)\n{audit_line(entry)}"
    )


async def _purge_blobs(ctx: ToolContext, args: PurgeBlobsArgs) -> str:
    orphans = await asyncio.to_thread(orphaned_files, ctx)
    sizes = {p: p.stat().st_size for p in orphans if p.exists()}
    total = sum(sizes.values())
    if not orphans:
        return "no orphaned artifact files"
    if not args.confirm:
        listing = "\n".join(f"- {p} ({sizes.get(p, 0)} bytes)" for p in orphans[:50])
        return f"would delete {len(orphans)} file(s), {total} bytes (confirm=true to delete):\n{listing}"
    what = {"files": [str(p) for p in orphans], "bytes": total}
    entry = write_audit(ctx, "purge_orphaned_blobs", args.reason or "orphaned files", what)
    for path in orphans:
        path.unlink(missing_ok=True)
        if path.parent.exists() and not any(path.parent.iterdir()):
            path.parent.rmdir()
    return f"deleted {len(orphans)} orphaned file(s), {total} bytes\n{audit_line(entry)}"


async def _compact(ctx: ToolContext, args: CompactArgs) -> str:
    require_person(ctx, "compact_database")
    catalog = ctx.services["catalog"]
    before = (await asyncio.to_thread(database_size, catalog)).get("bytes") or 0
    entry = write_audit(
        ctx, "compact_database", args.reason or "asked by a person", {"bytes": before}
    )
    await asyncio.to_thread(compact, catalog)
    after = (await asyncio.to_thread(database_size, catalog)).get("bytes") or 0
    return f"compacted the database: {before} -> {after} bytes\n{audit_line(entry)}"


PURGE_TOOLS = [
    Tool(
        "purge_old_events",
        "Delete the transcripts of sessions that ended long ago (their record, result and "
        "final text stay) and delivered inbox messages.",
        PurgeEventsArgs,
        Effect.IDEMPOTENT,
        _purge_events,
        modes=MGMT_MODES,
        granted=True,
    ),
    Tool(
        "purge_orphaned_blobs",
        "Delete artifact files the catalog no longer knows (confirm=true), or list them.",
        PurgeBlobsArgs,
        Effect.IDEMPOTENT,
        _purge_blobs,
        modes=MGMT_MODES,
        granted=True,
    ),
    Tool(
        "compact_database",
        "VACUUM the database (VACUUM ANALYZE on PostgreSQL). Only on a person's request.",
        CompactArgs,
        Effect.IDEMPOTENT,
        _compact,
        modes=MGMT_MODES,
        granted=True,
    ),
]
