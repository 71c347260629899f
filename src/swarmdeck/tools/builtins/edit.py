"""edit_file: replace an exact string in a file of the workdir, journaled (edit_journal.py).

The same replacement serves the text editor's str_replace, and its insert is here too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.tools.base import WRITE_MODES, Effect, Tool, ToolContext, ToolOutcome
from swarmdeck.tools.builtins.edit_journal import Change, run_edit
from swarmdeck.tools.builtins.files import MAX_WRITE_BYTES, _display, _root
from swarmdeck.tools.builtins.patch_format import nearest
from swarmdeck.tools.builtins.text_file import diff_excerpt, read_text
from swarmdeck.tools.paths import confine

Plan = Callable[[], tuple[list[Change], str]]


class EditFileArgs(BaseModel):
    """Arguments of edit_file."""

    path: str  # relative to the workdir, as the system prompt says
    old_string: str = Field(description="the exact text to replace, indentation included")
    new_string: str = Field(description="its replacement")
    replace_all: bool = Field(False, description="replace every occurrence")


def writable(ctx: ToolContext, raw: str, tool: str) -> tuple[Path, str]:
    """The confined path an edit may write (as write_file's), and how the model sees it."""
    if ctx.read_only or ctx.mode not in WRITE_MODES:
        raise PermissionDeniedError(f"{tool} is not allowed in {ctx.mode} mode (read-only)")
    path = confine(ctx.workdir, raw, for_write=True)
    return path, _display(path, _root(ctx))


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _where(text: str, old: str) -> str:
    """Where `old` is missing from `text`: why, and the nearest lines there are."""
    lines = text.splitlines()
    if not old.strip():
        return "old_string is empty or only whitespace"
    squeezed = " ".join(old.split())
    for number, line in enumerate(lines, 1):
        if " ".join(line.split()) == squeezed:
            return (
                f"old_string is not in the file; line {number} differs only in whitespace:\n{line}"
            )
    return "old_string is not in the file" + nearest(lines, old.strip("\n").splitlines())


def replacement(text: str, old: str, new: str, replace_all: bool, shown: str) -> tuple[str, int]:
    """`text` with `old` replaced by `new`, and how many times; ToolError saying why not."""
    if old == new:
        raise ToolError("old_string and new_string are the same: nothing to change")
    count = text.count(old) if old else 0
    if count == 0:
        raise ToolError(f"{shown}: {_where(text, old)}")
    if count > 1 and not replace_all:
        at, lines = -1, []
        for _ in range(min(count, 10)):
            at = text.index(old, at + 1)
            lines.append(str(_line_of(text, at)))
        raise ToolError(
            f"{shown}: old_string appears {count} times (lines {', '.join(lines)}); add "
            "surrounding lines to make it unique, or set replace_all"
        )
    return text.replace(old, new), count


def replace_plan(
    ctx: ToolContext, raw: str, old: str, new: str, replace_all: bool, tool: str
) -> Plan:
    """The plan of a replacement in one file (its checks run in the plan, off the loop)."""
    path, shown = writable(ctx, raw, tool)

    def plan() -> tuple[list[Change], str]:
        current = read_text(path, shown)
        text, count = replacement(current.text, old, new, replace_all, shown)
        data = _sized(current.encode(text, shown), shown)
        times = f"{count} replacements" if count > 1 else "1 replacement"
        summary = f"edited {shown} ({times})\n{diff_excerpt(shown, current.text, text)}"
        return [Change(path, shown, current.raw, data)], summary

    return plan


def insert_plan(ctx: ToolContext, raw: str, after_line: int, new: str, tool: str) -> Plan:
    """The plan of inserting `new` after line `after_line` (0: at the top) of one file."""
    path, shown = writable(ctx, raw, tool)

    def plan() -> tuple[list[Change], str]:
        current = read_text(path, shown)
        lines = current.text.splitlines(keepends=True)
        if after_line > len(lines):
            raise ToolError(f"{shown} has {len(lines)} lines: insert_line must be 0..{len(lines)}")
        if lines and not lines[-1].endswith("\n") and after_line == len(lines):
            lines[-1] += "\n"
        text = "".join(
            [*lines[:after_line], new if new.endswith("\n") else new + "\n", *lines[after_line:]]
        )
        data = _sized(current.encode(text, shown), shown)
        summary = f"inserted into {shown} after line {after_line}\n{diff_excerpt(shown, current.text, text)}"
        return [Change(path, shown, current.raw, data)], summary

    return plan


def _sized(data: bytes, shown: str) -> bytes:
    if len(data) > MAX_WRITE_BYTES:
        raise ToolError(f"{shown} would be {len(data)} bytes, over the {MAX_WRITE_BYTES} byte cap")
    return data


async def _edit_file(ctx: ToolContext, args: EditFileArgs) -> str | ToolOutcome:
    plan = replace_plan(
        ctx, args.path, args.old_string, args.new_string, args.replace_all, "edit_file"
    )
    return await run_edit(ctx, plan)


EDIT_FILE = Tool(
    name="edit_file",
    description=(
        "Replace an exact string in a file (it must appear once, or set replace_all); "
        "answers with a diff. Prefer it to rewriting a file."
    ),
    args_model=EditFileArgs,
    # Journaled with the file's hashes: a rerun never applies it twice (edit_journal.py).
    effect=Effect.IDEMPOTENT,
    body=_edit_file,
    modes=WRITE_MODES,
)
