"""Artifacts: named outputs a session keeps beyond its workdir, linked as artifact://S/NAME."""

from __future__ import annotations

import asyncio
import hashlib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.filemodes import private_dir, write_private
from swarmdeck.secrets.redact import default_redactor
from swarmdeck.tools.base import ALL_MODES, Effect, Tool, ToolContext

# The hook for a wider reach: a tool context whose services carry this grant reads and
# lists artifacts of every tree (a system agent's, once plugins grant it). Nothing sets it
# yet; without it a session reaches its own tree only.
STORE_WIDE_GRANT = "artifacts:store"

# One read returns at most this many characters: a large artifact is read in parts, so
# reading it never floods the model's context.
READ_LIMIT = 8_000

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LINK_RE = re.compile(r"^artifact://([A-Za-z0-9._~-]+)/(.+)$")


def check_name(name: str) -> str:
    """Refuse names that could leave the artifact folder or confuse links."""
    if default_redactor().contains_secret(name):
        # Not echoed: the name is the secret. A name becomes a link in every verdict.
        raise PermissionDeniedError("invalid artifact name: it contains a credential")
    if not NAME_RE.match(name) or ".." in name:
        raise PermissionDeniedError(
            f"invalid artifact name {name!r}: use letters, digits, '.', '_' or '-' (no '..', no '/')"
        )
    return name


def link(session_id: str, name: str) -> str:
    """The artifact:// link of an artifact."""
    return f"artifact://{session_id}/{name}"


def parse_link(text: str) -> tuple[str, str]:
    """(session_id, name) of an artifact:// link; ToolError when it is not one."""
    match = LINK_RE.match(text)
    if not match:
        raise ToolError(f"not an artifact link: {text!r} (expected artifact://SESSION/NAME)")
    return match.group(1), check_name(match.group(2))


def store_artifact(
    catalog: Any, root: Path, session_id: str, name: str, data: bytes, max_bytes: int
) -> str:
    """Write an artifact file and its catalog row; returns its link."""
    check_name(name)
    if len(data) > max_bytes:
        raise ToolError(f"artifact too large: {len(data)} bytes (limit {max_bytes})")
    folder = private_dir(root / session_id)
    path = folder / name
    write_private(path, data)
    catalog.put_artifact(session_id, name, str(path), len(data), hashlib.sha256(data).hexdigest())
    return link(session_id, name)


def load_artifact(catalog: Any, session_id: str, name: str) -> bytes:
    """An artifact's bytes; ToolError when it does not exist."""
    meta = catalog.artifact(session_id, check_name(name))
    if meta is None:
        raise ToolError(f"no artifact {link(session_id, name)}")
    return Path(meta["path"]).read_bytes()


class WriteArgs(BaseModel):
    """Store a named artifact."""

    name: str = Field(description="File-like name, e.g. report.md")
    content: str


class ReadArgs(BaseModel):
    """Read an artifact of a session of your own tree (or an artifact:// link)."""

    name: str = Field(description="Artifact name, or a full artifact://SESSION/NAME link")
    session_id: str | None = Field(
        None, description="Whose artifact (a session of your tree); yours when omitted"
    )
    offset: int = Field(0, ge=0, description="First character to read (0: the start)")
    limit: int = Field(
        READ_LIMIT, ge=1, le=READ_LIMIT, description=f"Characters to read (at most {READ_LIMIT})"
    )


class ListArgs(BaseModel):
    """List artifacts."""

    session_id: str | None = Field(
        None, description="Whose (a session of your tree); yours when omitted"
    )


def _settings(ctx: ToolContext) -> Any:
    return ctx.services["settings"]


async def _write(ctx: ToolContext, args: WriteArgs) -> str:
    settings = _settings(ctx)
    redact = ctx.services["catalog"].redact
    data = redact(args.content).encode()
    # Off the loop, as every artifact tool: a file write, and a catalog write that may wait
    # for SQLite's lock or a PostgreSQL round trip, must not hold up the other sessions.
    stored = await asyncio.to_thread(
        store_artifact,
        ctx.services["catalog"],
        settings.artifacts_dir,
        ctx.session_id,
        args.name,
        data,
        settings.artifact_max_bytes,
    )
    return f"stored {stored}"


def check_reach(ctx: ToolContext, session_id: str) -> str:
    """`session_id` when the caller may reach its artifacts: a session of its own tree (its
    root and the root's descendants), or any with the store-wide grant."""
    if session_id == ctx.session_id or ctx.services.get(STORE_WIDE_GRANT):
        return session_id
    catalog = ctx.services["catalog"]
    target = catalog.find_session(session_id)
    own = catalog.get_session(ctx.session_id)
    if target is None or target.root_id != own.root_id:
        # The same answer for another tree and for no session: ids are not probed.
        raise PermissionDeniedError(
            f"session {session_id} is not in your session tree; artifacts are shared within "
            "a tree only"
        )
    return session_id


def _reachable_text(ctx: ToolContext, session_id: str, name: str) -> str:
    check_reach(ctx, session_id)
    return load_artifact(ctx.services["catalog"], session_id, name).decode(errors="replace")


async def _read(ctx: ToolContext, args: ReadArgs) -> str:
    if args.name.startswith("artifact://"):
        session_id, name = parse_link(args.name)
    else:
        session_id, name = args.session_id or ctx.session_id, args.name
    text = await asyncio.to_thread(_reachable_text, ctx, session_id, name)
    if args.offset == 0 and len(text) <= args.limit:
        return text
    end = min(len(text), args.offset + args.limit)
    part = text[args.offset : end]
    more = f"; read on with offset={end}" if end < len(text) else ""
    return f"{part}\n[characters {args.offset}-{end} of {len(text)}{more}]"


def _reachable_rows(ctx: ToolContext, session_id: str) -> list[dict[str, Any]]:
    return ctx.services["catalog"].artifacts_of([check_reach(ctx, session_id)])


async def _list(ctx: ToolContext, args: ListArgs) -> str:
    rows = await asyncio.to_thread(_reachable_rows, ctx, args.session_id or ctx.session_id)
    if not rows:
        return "no artifacts"
    return "\n".join(f"{link(r['session_id'], r['name'])}  {r['size']} bytes" for r in rows)


ARTIFACT_TOOLS = [
    Tool(
        "write_artifact",
        "Store a named artifact (a report, a data file) beyond the workdir; returns its "
        "artifact:// link, which you quote where you refer to it.",
        WriteArgs,
        Effect.IDEMPOTENT,
        _write,
        modes=ALL_MODES,
    ),
    Tool(
        "read_artifact",
        "Read an artifact of your session tree by name or link; a long one in parts "
        "(offset, limit).",
        ReadArgs,
        Effect.READ,
        _read,
    ),
    Tool(
        "list_artifacts",
        "List the artifacts of a session of your tree.",
        ListArgs,
        Effect.READ,
        _list,
    ),
]
