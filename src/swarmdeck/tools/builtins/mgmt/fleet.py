"""Tools that change the fleet: terminate a stuck session, scale a worker supervisor. They
run only on a turn that a person's message started."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, Field

from swarmdeck.catalog.supervisors import SupervisorRegistry
from swarmdeck.config import LEASE_SECONDS
from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.tools.base import Effect, Tool, ToolContext
from swarmdeck.tools.builtins.mgmt.audit import audit_line, write_audit
from swarmdeck.tools.builtins.mgmt.guards import require_person
from swarmdeck.tools.builtins.mgmt.sweeper import MGMT_MODES, forest, ops

MAX_PROCESSES = 64


class TerminateArgs(BaseModel):
    """Terminate a session."""

    session_id: str
    reason: str = Field("", description="Why, for the audit.")


class ScaleArgs(BaseModel):
    """Change a supervisor's process count."""

    processes: int = Field(ge=1, le=MAX_PROCESSES)
    supervisor_id: str | None = Field(None, description="Which; needed when several run.")
    reason: str = ""


async def _terminate(ctx: ToolContext, args: TerminateArgs) -> str:
    require_person(ctx, "force_terminate_session")
    found = await forest(ctx)
    target = found.by_id.get(args.session_id)
    if target is None:
        raise ToolError(f"no session {args.session_id}")
    if target.system:
        raise PermissionDeniedError(f"{args.session_id} is a system session: never terminated")
    mine = ctx.session_id
    chain = set()
    cursor = found.by_id.get(mine)
    while cursor is not None:
        chain.add(cursor.id)
        cursor = found.by_id.get(cursor.parent_id) if cursor.parent_id else None
    if args.session_id in chain:
        raise PermissionDeniedError(f"{args.session_id} is this session or one of its ancestors")
    if target.terminal:
        return f"{args.session_id} has already ended ({target.status})"
    what = {"session": args.session_id, "sessions": found.subtree(args.session_id), "bytes": 0}
    entry = write_audit(ctx, "force_terminate_session", args.reason or "asked by a person", what)
    cancelled = await ops(ctx).terminate(
        args.session_id, f"terminated: {args.reason or 'by the operator'}"
    )
    return f"terminated {len(cancelled)} session(s): {', '.join(cancelled)}\n{audit_line(entry)}"


async def _scale(ctx: ToolContext, args: ScaleArgs) -> str:
    require_person(ctx, "scale_workers")
    registry = SupervisorRegistry(ctx.services["catalog"].engine)
    settings = ctx.services.get("settings")
    lease_s = settings.lease_seconds if settings is not None else LEASE_SECONDS
    now = time.time()
    rows = await asyncio.to_thread(registry.rows)
    live = [r for r in rows if r.live(now, lease_s)]
    if not live:
        raise ToolError(
            "no live worker supervisor: scaling needs `swarmdeck worker --processes N` running"
        )
    if args.supervisor_id is None and len(live) > 1:
        ids = ", ".join(r.supervisor_id for r in live)
        raise ToolError(f"several supervisors run ({ids}): name one as supervisor_id")
    chosen = next((r for r in live if args.supervisor_id in (None, r.supervisor_id)), None)
    if chosen is None:
        raise ToolError(f"no live supervisor {args.supervisor_id}")
    what = {
        "supervisor": chosen.supervisor_id,
        "from": chosen.processes,
        "to": args.processes,
        "bytes": 0,
    }
    entry = write_audit(ctx, "scale_workers", args.reason or "asked by a person", what)
    await asyncio.to_thread(registry.set_processes, chosen.supervisor_id, args.processes)
    return (
        f"supervisor {chosen.supervisor_id}: {chosen.processes} -> {args.processes} "
        f"worker processes\n{audit_line(entry)}"
    )


FLEET_TOOLS = [
    Tool(
        "force_terminate_session",
        "Cancel a stuck session and its sub-agents. Only on a person's request; never a "
        "system session.",
        TerminateArgs,
        Effect.IDEMPOTENT,
        _terminate,
        modes=MGMT_MODES,
        granted=True,
    ),
    Tool(
        "scale_workers",
        "Set the number of worker processes of a `worker --processes` supervisor. Only on a "
        "person's request.",
        ScaleArgs,
        Effect.IDEMPOTENT,
        _scale,
        modes=MGMT_MODES,
        granted=True,
    ),
]
