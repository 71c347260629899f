"""apply_patch: a Codex-format patch (patch_format.py) applied to the workdir atomically:
every hunk of every file applies, or nothing is written. Journaled like every edit."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

from swarmdeck.errors import ToolError
from swarmdeck.models.edit_shapes import APPLY_PATCH
from swarmdeck.tools.base import WRITE_MODES, Effect, Tool, ToolContext, ToolOutcome
from swarmdeck.tools.builtins.edit import Plan, writable
from swarmdeck.tools.builtins.edit_journal import Change, run_edit
from swarmdeck.tools.builtins.files import MAX_WRITE_BYTES, _open_regular
from swarmdeck.tools.builtins.patch_format import FileOp, apply_hunks, parse_patch
from swarmdeck.tools.builtins.text_file import diff_excerpt, read_text

DESCRIPTION = (
    "Edit files with a patch: '*** Begin Patch', then per file '*** Add File: path' (lines "
    "starting with +), '*** Delete File: path', or '*** Update File: path' (optionally "
    "'*** Move to: new path') with hunks: '@@' (or '@@ a line above, e.g. def f():'), then "
    "context lines starting with a space (3 above and below each change), removed lines with "
    "-, added lines with +; then '*** End Patch'. Paths are relative. All files change or none."
)


class ApplyPatchArgs(BaseModel):
    """Arguments of apply_patch."""

    input: str = Field(description="the whole patch, from *** Begin Patch to *** End Patch")


def _raw(path: Path, shown: str) -> bytes | None:
    """A file's bytes, None when absent (a symlink or a hard-linked file is refused)."""
    if not os.path.lexists(path):
        return None
    with os.fdopen(_open_regular(path, shown), "rb") as f:
        return f.read()


def _op_changes(ctx: ToolContext, op: FileOp) -> tuple[list[Change], str]:
    """The files one operation changes, and its line of the summary (with a diff)."""
    path, shown = writable(ctx, op.path, APPLY_PATCH)
    if op.kind == "add":
        return [Change(path, shown, _raw(path, shown), op.contents.encode("utf-8"))], f"A {shown}"
    if op.kind == "delete":
        before = _raw(path, shown)
        if before is None:
            raise ToolError(f"cannot delete {shown}: no such file")
        return [Change(path, shown, before, None)], f"D {shown}"
    if not os.path.lexists(path):
        raise ToolError(f"cannot update {shown}: no such file")
    current = read_text(path, shown)
    lines = apply_hunks(current.text.splitlines(), op.hunks, shown)
    text = "".join(f"{line}\n" for line in lines)
    data = current.encode(text, shown)
    diff = diff_excerpt(shown, current.text, text)
    if op.move_to is None or op.move_to == op.path:
        return [Change(path, shown, current.raw, data)], f"M {shown}\n{diff}"
    dest, dest_shown = writable(ctx, op.move_to, APPLY_PATCH)
    changes = [
        Change(path, shown, current.raw, None),
        Change(dest, dest_shown, _raw(dest, dest_shown), data),
    ]
    return changes, f"M {shown} -> {dest_shown}\n{diff}"


def patch_plan(ctx: ToolContext, patch: str) -> Plan:
    """The plan of a whole patch: every operation checked before anything is written."""
    ops = parse_patch(patch)
    for op in ops:  # confinement and mode first: nothing is read outside the workdir
        writable(ctx, op.path, APPLY_PATCH)
        if op.move_to:
            writable(ctx, op.move_to, APPLY_PATCH)

    def plan() -> tuple[list[Change], str]:
        changes: list[Change] = []
        lines = []
        for op in ops:
            op_changes, line = _op_changes(ctx, op)
            taken = {c.path for c in changes}
            for change in op_changes:
                if change.path in taken:
                    raise ToolError(
                        f"the patch changes {change.shown} twice; use one section per file"
                    )
                if change.after is not None and len(change.after) > MAX_WRITE_BYTES:
                    raise ToolError(f"{change.shown} would be over the {MAX_WRITE_BYTES} byte cap")
            changes += op_changes
            lines.append(line)
        return changes, "applied the patch:\n" + "\n".join(lines)

    return plan


async def _apply_patch(ctx: ToolContext, args: ApplyPatchArgs) -> str | ToolOutcome:
    return await run_edit(ctx, patch_plan(ctx, args.input))


APPLY_PATCH_TOOL = Tool(
    name=APPLY_PATCH,
    description=DESCRIPTION,
    args_model=ApplyPatchArgs,
    # Journaled with every file's hashes: a rerun never applies it twice (edit_journal.py).
    effect=Effect.IDEMPOTENT,
    body=_apply_patch,
    modes=WRITE_MODES,
)
