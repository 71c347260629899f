"""Anthropic's text editor (`str_replace_based_edit_tool`, the client tool type Claude models
are trained on) over the same implementation as the other file tools: view is read_file
and list_dir, str_replace is edit_file, create is write_file, insert is an edit of its own.
Read-only modes may only view."""

from __future__ import annotations

import asyncio
from typing import Literal

from pydantic import BaseModel, Field

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.models.edit_shapes import TEXT_EDITOR
from swarmdeck.secrets.redact import default_redactor
from swarmdeck.tools.base import ALL_MODES, Effect, Tool, ToolContext, ToolOutcome
from swarmdeck.tools.builtins.edit import insert_plan, replace_plan
from swarmdeck.tools.builtins.edit_journal import run_edit
from swarmdeck.tools.builtins.files import (
    DEFAULT_READ_LINES,
    WriteFileArgs,
    _display,
    _listing,
    _numbered,
    _root,
    _write_file,
)
from swarmdeck.tools.paths import confine


class TextEditorArgs(BaseModel):
    """Arguments of the text editor, as Anthropic defines them."""

    command: Literal["view", "create", "str_replace", "insert", "undo_edit"]
    path: str = Field(description="file or directory path, relative to the workdir")
    view_range: list[int] | None = Field(
        None, description="[first, last] line; last -1: to the end"
    )
    file_text: str | None = Field(None, description="create: the new file's content")
    old_str: str | None = Field(None, description="str_replace: the exact text to replace")
    new_str: str | None = Field(None, description="str_replace/insert: the new text")
    insert_line: int | None = Field(None, ge=0, description="insert: after this line (0: top)")


def _need(value: object, name: str, command: str) -> None:
    if value is None:
        raise ToolError(f"{command} needs {name}")


async def _view(ctx: ToolContext, args: TextEditorArgs) -> str:
    path = confine(ctx.workdir, args.path, for_write=False)
    shown = _display(path, _root(ctx))
    if path.is_dir():
        text = await asyncio.to_thread(_listing, path, shown)
        return default_redactor().redact(text)
    first, limit = 1, DEFAULT_READ_LINES
    if args.view_range:
        if len(args.view_range) != 2 or args.view_range[0] < 1:
            raise ToolError("view_range is [first, last]: first >= 1, last >= first or -1")
        first, last = args.view_range
        if last != -1:
            if last < first:
                raise ToolError("view_range is [first, last]: last >= first or -1")
            limit = last - first + 1
    text = await asyncio.to_thread(_numbered, path, shown, first, limit)
    return default_redactor().redact(text)


async def _text_editor(ctx: ToolContext, args: TextEditorArgs) -> str | ToolOutcome:
    command = args.command
    if command == "view":
        return await _view(ctx, args)
    if ctx.read_only:
        raise PermissionDeniedError(f"{command} is not allowed in {ctx.mode} mode: only view")
    if command == "undo_edit":
        raise ToolError("undo_edit is not supported; make the reverse edit with str_replace")
    if command == "create":
        _need(args.file_text, "file_text", command)
        return await _write_file(ctx, WriteFileArgs(path=args.path, content=args.file_text or ""))
    if command == "str_replace":
        _need(args.old_str, "old_str", command)
        plan = replace_plan(
            ctx, args.path, args.old_str or "", args.new_str or "", False, TEXT_EDITOR
        )
        return await run_edit(ctx, plan)
    _need(args.insert_line, "insert_line", command)
    _need(args.new_str, "new_str", command)
    plan = insert_plan(ctx, args.path, args.insert_line or 0, args.new_str or "", TEXT_EDITOR)
    return await run_edit(ctx, plan)


TEXT_EDITOR_TOOL = Tool(
    name=TEXT_EDITOR,
    description=(
        "View a file or directory, or edit a file: command view (view_range), create "
        "(file_text), str_replace (old_str must appear once, new_str), insert (insert_line, "
        "new_str). Paths are relative to the workdir."
    ),
    args_model=TextEditorArgs,
    # Its edits are journaled with the file's hashes (edit_journal.py); create writes a
    # whole file, which is idempotent like write_file.
    effect=Effect.IDEMPOTENT,
    body=_text_editor,
    modes=ALL_MODES,
)
