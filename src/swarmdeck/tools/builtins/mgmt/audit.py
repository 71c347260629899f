"""Every removal and purge is written down twice, before it is carried out: in the caller's
transcript (an `audit` entry) and in its audit artifact (one JSON line per action, a file a
day). Both are keyed by the call, so a rerun after a crash writes nothing twice."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from swarmdeck.tools.base import ToolContext

AUDIT_KIND = "audit"
AUDIT_MAX_BYTES = 64_000_000


def audit_name(ts: float) -> str:
    """The audit artifact of a day."""
    return f"audit-{dt.datetime.fromtimestamp(ts, dt.UTC):%Y-%m-%d}.jsonl"


def write_audit(ctx: ToolContext, action: str, why: str, what: dict[str, Any]) -> dict[str, Any]:
    """Record one action (what, when, why, how many bytes) in both places; returns it."""
    catalog = ctx.services["catalog"]
    settings = ctx.services["settings"]
    now = time.time()
    entry = {
        "action": action,
        "at": dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="seconds"),
        "why": why,
        "origin": ctx.origin,
        "call": ctx.call_key,
        **what,
    }
    key = f"audit:{ctx.call_key or hashlib.sha256(json.dumps(entry).encode()).hexdigest()[:16]}"
    if catalog.append_event(ctx.session_id, key, AUDIT_KIND, entry):
        _append_line(catalog, settings.artifacts_dir, ctx.session_id, now, entry)
    return entry


def _append_line(
    catalog: Any, root: Path, session_id: str, now: float, entry: dict[str, Any]
) -> None:
    """Add the entry to the day's audit artifact (a file under the artifacts folder)."""
    name = audit_name(now)
    folder = root / session_id
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / name
    line = json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n"
    with path.open("a", encoding="utf-8") as handle:
        handle.write(catalog.redact(line))
    data = path.read_bytes()
    if len(data) <= AUDIT_MAX_BYTES:
        catalog.put_artifact(
            session_id, name, str(path), len(data), hashlib.sha256(data).hexdigest()
        )


def audit_line(entry: dict[str, Any]) -> str:
    """The entry as the model reads it in the tool's result."""
    return "audit: " + json.dumps(entry, ensure_ascii=False, sort_keys=True)
