"""Durable edits: each edit is journaled with its files' content hashes before and after,
before it writes, so a rerun after a crash never applies it twice.

An edit is not idempotent (replacing `a` with `ab` twice gives `abb`). On a rerun of the
same call (the same call key), the journal entry says what the first run meant to do: every
file at its after-hash means it was done (its answer is given again); every file at its
before-hash means it was not written (it is done now); anything else means the files moved
on since, and the edit is reported interrupted to the model, as a `once` tool is.

The entry is a transcript event of the session (kind `edit`, key `edit:<call key>`), written
through the catalog the tool's context carries; without one (a tool called outside a
session) the edit is simply applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmdeck.errors import ToolError
from swarmdeck.tools.base import ToolContext, ToolOutcome
from swarmdeck.tools.builtins.files import _write

EDIT_KIND = "edit"
ABSENT = "absent"
INTERRUPTED_EDIT = (
    "interrupted: this edit was cut off by a crash, and its files are no longer as it left "
    "them ({files}), so it was not applied again. Read them, then decide whether to edit again."
)


@dataclass(frozen=True)
class Change:
    """One file an edit writes: its content before (None: absent) and after (None: deleted)."""

    path: Path
    shown: str
    before: bytes | None
    after: bytes | None


def content_hash(data: bytes | None) -> str:
    """The hash the journal keeps of a file's content."""
    return ABSENT if data is None else hashlib.sha256(data).hexdigest()


def current_hash(path: Path) -> str:
    """The hash of what `path` holds now (a symlink or a directory is neither hash)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return ABSENT
    if not stat.S_ISREG(st.st_mode):
        return f"not a regular file ({stat.filemode(st.st_mode)})"
    return content_hash(path.read_bytes())


def _journal_key(ctx: ToolContext) -> str:
    return f"edit:{ctx.call_key}"


def _catalog(ctx: ToolContext) -> Any:
    return ctx.services.get("catalog") if ctx.call_key else None


async def run_edit(
    ctx: ToolContext, plan: Callable[[], tuple[list[Change], str]]
) -> str | ToolOutcome:
    """Plan the edit (read, check, compute: in a thread), journal it, write it; on a rerun,
    answer from the journal as the module says."""
    catalog = _catalog(ctx)
    prior = None
    if catalog is not None:
        prior = await asyncio.to_thread(catalog.event_by_key, ctx.session_id, _journal_key(ctx))
    if prior is not None:
        files: dict[str, list[str]] = prior.payload.get("files", {})
        now = {
            shown: await asyncio.to_thread(current_hash, Path(p)) for shown, p in _paths(ctx, files)
        }
        if all(now[s] == after for s, (_, after) in files.items()):
            return str(prior.payload.get("summary", "done"))
        if not all(now[s] == before for s, (before, _) in files.items()):
            return ToolOutcome(INTERRUPTED_EDIT.format(files=_states(files, now)), is_error=True)
    changes, summary = await asyncio.to_thread(plan)
    hashes = {c.shown: [content_hash(c.before), content_hash(c.after)] for c in changes}
    if prior is not None and hashes != prior.payload.get("files"):
        return ToolOutcome(INTERRUPTED_EDIT.format(files=", ".join(hashes)), is_error=True)
    if catalog is not None and prior is None:
        payload = {"files": hashes, "summary": summary}
        await asyncio.to_thread(
            catalog.append_event, ctx.session_id, _journal_key(ctx), EDIT_KIND, payload
        )
    await asyncio.to_thread(write_all, changes)
    return summary


def _states(files: dict[str, list[str]], now: dict[str, str]) -> str:
    """Each journaled file as the rerun found it: written, not written, or changed since."""
    said = {0: "not written", 1: "written"}
    return ", ".join(
        f"{shown}: {said.get(hashes.index(now[shown]), '') if now[shown] in hashes else 'changed since'}"
        for shown, hashes in files.items()
    )


def _paths(ctx: ToolContext, files: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(shown, path) of each journaled file: relative to the workdir as shown."""
    root = Path(ctx.workdir).resolve()
    return [(shown, str(root / shown)) for shown in files]


def write_all(changes: list[Change]) -> None:
    """Write every change or none: a failure puts back the files already written."""
    done: list[Change] = []
    ordered = sorted(changes, key=lambda c: c.after is None)  # deletions last
    try:
        for change in ordered:
            if change.after is None:
                change.path.unlink(missing_ok=True)
            else:
                _write(change.path, change.after)
            done.append(change)
    except OSError as exc:
        for change in reversed(done):
            _restore(change)
        raise ToolError(
            f"cannot write {change.shown}: {exc.strerror}; nothing was changed"
        ) from None


def _restore(change: Change) -> None:
    """Put one file back as it was before a failed edit (best effort: the error is reported)."""
    with contextlib.suppress(OSError):
        if change.before is None:
            change.path.unlink(missing_ok=True)
        else:
            _write(change.path, change.before)
