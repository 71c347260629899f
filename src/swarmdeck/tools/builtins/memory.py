"""The blackboard tools: memory_get, memory_set, memory_list, memory_delete.

Scoped to the caller's swarm by default (its tree's outside a swarm); `scope` picks the
tree's or the store's. A write is a new version; with `expected_version` it is a
compare-and-set, and a conflict answers with the current value and version. Writes carry
the call's key, so a call run again after a crash lands once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from swarmdeck.errors import ToolError, UsageError
from swarmdeck.memory.blackboard import Blackboard, Entry, Scope, WriteOutcome
from swarmdeck.memory.scopes import scope_for
from swarmdeck.tools.base import Effect, Tool, ToolContext, ToolOutcome

ScopeName = Literal["swarm", "tree", "store"]
SCOPE_HELP = "swarm (default in a swarm), tree (default elsewhere) or store"
LIST_LIMIT = 200


class GetArgs(BaseModel):
    """Read one key."""

    key: str = Field(description="The key.")
    scope: ScopeName | None = Field(None, description=SCOPE_HELP)


class SetArgs(BaseModel):
    """Write one key."""

    key: str = Field(description="The key.")
    value: Any = Field(description="Any JSON value.")
    expected_version: int | None = Field(
        None,
        ge=0,
        description="Write only over this version (0: only if the key was never written); "
        "on a conflict you get the current value and version.",
    )
    scope: ScopeName | None = Field(None, description=SCOPE_HELP)


class ListArgs(BaseModel):
    """List keys."""

    prefix: str = Field("", description="Only keys starting with this.")
    scope: ScopeName | None = Field(None, description=SCOPE_HELP)


class DeleteArgs(BaseModel):
    """Delete one key."""

    key: str = Field(description="The key.")
    expected_version: int | None = Field(None, ge=0, description="Only if at this version.")
    scope: ScopeName | None = Field(None, description=SCOPE_HELP)


def _board(ctx: ToolContext) -> Blackboard:
    catalog = ctx.services["catalog"]
    return Blackboard(catalog.engine, catalog.redact)


def _scope(ctx: ToolContext, kind: str | None) -> Scope:
    record = ctx.services["catalog"].get_session(ctx.session_id)
    try:
        return scope_for(record, kind)
    except UsageError as exc:
        raise ToolError(exc.one_line()) from None


async def _on_board(ctx: ToolContext, kind: str | None, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(blackboard, scope, *args) off the loop, in the scope `kind` names for the caller
    (read there too: on PostgreSQL a read is a round trip every session of the loop would
    wait for); a bad key or value is the call's error."""

    def on_board() -> Any:
        return fn(_board(ctx), _scope(ctx, kind), *args)

    try:
        return await asyncio.to_thread(on_board)
    except UsageError as exc:
        raise ToolError(exc.one_line()) from None


def _write_id(ctx: ToolContext) -> str | None:
    return f"{ctx.session_id}/{ctx.call_key}" if ctx.call_key else None


def _json(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False)


def _written(key: str, outcome: WriteOutcome, what: str) -> ToolOutcome:
    if outcome.landed:
        return ToolOutcome(_json({"key": key, what: True, "version": outcome.version}))
    current = outcome.current
    doc = {
        "key": key,
        "conflict": True,
        "current_version": outcome.version,
        "current_value": current.value if current and not current.deleted else None,
    }
    if current is not None and current.deleted:
        doc["deleted"] = True
    return ToolOutcome(
        "conflict: the key is no longer at the version you expected; nothing was written. "
        "Current: " + _json(doc),
        is_error=True,
    )


async def _get(ctx: ToolContext, args: GetArgs) -> str:
    entry: Entry | None = await _on_board(ctx, args.scope, Blackboard.get, args.key)
    if entry is None or entry.deleted:
        return _json({"key": args.key, "found": False, "version": entry.version if entry else 0})
    return _json({"key": args.key, "found": True, "version": entry.version, "value": entry.value})


async def _set(ctx: ToolContext, args: SetArgs) -> ToolOutcome:
    def write(board: Blackboard, scope: Scope) -> WriteOutcome:
        return board.set(
            scope,
            args.key,
            args.value,
            writer=ctx.session_id,
            expected_version=args.expected_version,
            write_id=_write_id(ctx),
        )

    return _written(args.key, await _on_board(ctx, args.scope, write), "written")


async def _list(ctx: ToolContext, args: ListArgs) -> str:
    def listed(board: Blackboard, scope: Scope) -> tuple[Scope, list[Entry]]:
        return scope, board.list(scope, args.prefix)

    scope, entries = await _on_board(ctx, args.scope, listed)
    shown = [{"key": e.key, "version": e.version, "value": e.value} for e in entries[:LIST_LIMIT]]
    doc: dict[str, Any] = {"scope": scope.kind, "keys": shown}
    if len(entries) > LIST_LIMIT:
        doc["more"] = len(entries) - LIST_LIMIT
    return _json(doc)


async def _delete(ctx: ToolContext, args: DeleteArgs) -> ToolOutcome:
    def delete(board: Blackboard, scope: Scope) -> WriteOutcome | None:
        return board.delete(
            scope,
            args.key,
            writer=ctx.session_id,
            expected_version=args.expected_version,
            write_id=_write_id(ctx),
        )

    outcome = await _on_board(ctx, args.scope, delete)
    if outcome is None:
        return ToolOutcome(_json({"key": args.key, "found": False}))
    return _written(args.key, outcome, "deleted")


# Granted: offered to the sessions that name them (swarm members, agents whose `tools:`
# list them), not to every session by default.
MEMORY_TOOLS = [
    Tool(
        "memory_get",
        "Read a key of the shared blackboard: its value and version.",
        GetArgs,
        Effect.READ,
        _get,
        granted=True,
    ),
    Tool(
        "memory_set",
        "Write a key of the shared blackboard (a new version). Pass expected_version for a "
        "compare-and-set: on a conflict nothing is written and you get the current value.",
        SetArgs,
        Effect.IDEMPOTENT,
        _set,
        granted=True,
    ),
    Tool(
        "memory_list",
        "List the keys of the shared blackboard (with a prefix), with values and versions.",
        ListArgs,
        Effect.READ,
        _list,
        granted=True,
    ),
    Tool(
        "memory_delete",
        "Delete a key of the shared blackboard (its history stays).",
        DeleteArgs,
        Effect.IDEMPOTENT,
        _delete,
        granted=True,
    ),
]
MEMORY_TOOL_NAMES = tuple(t.name for t in MEMORY_TOOLS)
