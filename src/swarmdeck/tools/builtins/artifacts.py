"""Artifacts: named outputs a session keeps beyond its workdir, linked as artifact://S/NAME."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.tools.base import ALL_MODES, Effect, Tool, ToolContext

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LINK_RE = re.compile(r"^artifact://([A-Za-z0-9._~-]+)/(.+)$")


def check_name(name: str) -> str:
    """Refuse names that could leave the artifact folder or confuse links."""
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
    folder = root / session_id
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / name
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
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
    """Read an artifact of any session of your tree (or an artifact:// link)."""

    name: str = Field(description="Artifact name, or a full artifact://SESSION/NAME link")
    session_id: str | None = Field(None, description="Whose artifact; yours when omitted")


class ListArgs(BaseModel):
    """List artifacts."""

    session_id: str | None = Field(None, description="Whose; yours when omitted")


def _settings(ctx: ToolContext) -> Any:
    return ctx.services["settings"]


async def _write(ctx: ToolContext, args: WriteArgs) -> str:
    settings = _settings(ctx)
    redact = ctx.services["catalog"].redact
    data = redact(args.content).encode()
    return "stored " + store_artifact(
        ctx.services["catalog"],
        settings.artifacts_dir,
        ctx.session_id,
        args.name,
        data,
        settings.artifact_max_bytes,
    )


async def _read(ctx: ToolContext, args: ReadArgs) -> str:
    if args.name.startswith("artifact://"):
        session_id, name = parse_link(args.name)
    else:
        session_id, name = args.session_id or ctx.session_id, args.name
    return load_artifact(ctx.services["catalog"], session_id, name).decode(errors="replace")


async def _list(ctx: ToolContext, args: ListArgs) -> str:
    rows = ctx.services["catalog"].artifacts_of([args.session_id or ctx.session_id])
    if not rows:
        return "no artifacts"
    return "\n".join(f"{link(r['session_id'], r['name'])}  {r['size']} bytes" for r in rows)


ARTIFACT_TOOLS = [
    Tool(
        "write_artifact",
        "Store a named artifact (a report, a data file) beyond the workdir; returns its link.",
        WriteArgs,
        Effect.IDEMPOTENT,
        _write,
        modes=ALL_MODES,
    ),
    Tool("read_artifact", "Read an artifact by name or link.", ReadArgs, Effect.READ, _read),
    Tool("list_artifacts", "List a session's artifacts.", ListArgs, Effect.READ, _list),
]
