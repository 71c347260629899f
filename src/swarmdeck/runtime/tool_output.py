"""Large tool outputs: stored whole as an artifact; the model sees the head, the tail and
the link, and reads the rest with read_artifact (offset, limit) when it needs it."""

from __future__ import annotations

from dataclasses import replace

from swarmdeck.runtime.services import services
from swarmdeck.tools.base import ToolOutcome
from swarmdeck.tools.builtins.artifacts import store_artifact

# Above this many characters an output becomes an artifact; this much of each end stays.
LARGE_OUTPUT_CHARS = 16_000
HEAD_CHARS = 2_000
TAIL_CHARS = 2_000


def artifact_name(turn: int, call_id: str) -> str:
    """The artifact a call's whole output is kept in (one per call: a rerun replaces it)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in call_id)[:80]
    return f"tool-output-{turn}-{safe}.txt"


def shrink(session_id: str, turn: int, call_id: str, outcome: ToolOutcome) -> ToolOutcome:
    """The outcome as the model sees it: as it is when short, else its head and tail around
    the link of the artifact that holds it whole (redacted, like every stored text)."""
    content = outcome.content
    if len(content) <= LARGE_OUTPUT_CHARS:
        return outcome
    svc = services()
    data = svc.redactor.redact(content).encode()
    cap = svc.settings.artifact_max_bytes
    kept = data[:cap].decode(errors="ignore")
    link = store_artifact(
        svc.catalog,
        svc.settings.artifacts_dir,
        session_id,
        artifact_name(turn, call_id),
        kept.encode(),
        cap,
    )
    whole = "" if len(data) <= cap else f"; its first {cap} bytes are kept"
    note = (
        f"\n\n[… {len(content) - HEAD_CHARS - TAIL_CHARS} characters not shown. The whole "
        f"output ({len(content)} characters{whole}) is kept as the artifact {link} : read "
        f"any part of it with read_artifact, giving name, offset and limit.]\n\n"
    )
    return replace(outcome, content=content[:HEAD_CHARS] + note + content[-TAIL_CHARS:])
