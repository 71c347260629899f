"""File tools: read_file, list_dir, grep and write_file, all confined to the workdir."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.filemodes import replace_atomically
from swarmdeck.secrets.redact import default_redactor
from swarmdeck.tools.base import WRITE_MODES, Effect, Tool, ToolContext
from swarmdeck.tools.paths import CREDENTIAL_DIRS, confine, credential_reason, home_reason

MAX_FILE_BYTES = 50_000_000
MAX_OUTPUT_CHARS = 100_000
MAX_LINE_CHARS = 2_000
DEFAULT_READ_LINES = 2_000
BINARY_SNIFF_BYTES = 8_192
MAX_DIR_ENTRIES = 1_000
MAX_GREP_MATCHES = 200
MAX_GREP_LINE_CHARS = 300
# Bounds the time one grep can take on a huge tree.
MAX_GREP_FILES = 20_000
# Bigger files are skipped by grep: they are data or build output, not source.
MAX_GREP_FILE_BYTES = 5_000_000
MAX_WRITE_BYTES = 10_000_000
SKIP_DIRS = frozenset({".git"}) | CREDENTIAL_DIRS


class ReadFileArgs(BaseModel):
    """Arguments of read_file."""

    path: str  # relative to the workdir, as the system prompt says
    offset: int | None = Field(None, ge=1, description="first line (1-based)")
    limit: int | None = Field(None, ge=1, description="lines to show (default 2000)")


class ListDirArgs(BaseModel):
    """Arguments of list_dir."""

    path: str = Field(".", description="directory path, relative to the workdir")


class GrepArgs(BaseModel):
    """Arguments of grep."""

    pattern: str = Field(description="Python regular expression")
    path: str = Field(".", description="file or directory to search, relative to the workdir")
    glob: str | None = Field(None, description="only files whose name or path match, e.g. *.py")


class WriteFileArgs(BaseModel):
    """Arguments of write_file."""

    path: str  # relative to the workdir, as the system prompt says
    content: str = Field(description="the whole new content")


def _display(path: Path, root: Path) -> str:
    """`path` as the model should see it: relative to the workdir."""
    rel = path.relative_to(root).as_posix()
    return rel if rel else "."


def _root(ctx: ToolContext) -> Path:
    return Path(ctx.workdir).resolve()


def _open_regular(path: Path, shown: str) -> int:
    """Open a regular file for reading without following a symlink or blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ToolError(f"no such file: {shown}") from None
    except OSError as exc:
        raise ToolError(f"cannot open {shown}: {exc.strerror}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a directory; use list_dir" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise ToolError(f"{shown} is {kind}")
    if st.st_nlink > 1:
        os.close(fd)
        raise PermissionDeniedError(hard_link_refusal(shown, st.st_nlink))
    if st.st_size > MAX_FILE_BYTES:
        os.close(fd)
        raise ToolError(
            f"{shown} is {st.st_size} bytes, over the {MAX_FILE_BYTES} byte cap; use grep"
        )
    return fd


def hard_link_refusal(shown: str, links: int) -> str:
    """Why a file with several hard links is not read."""
    return (
        f"{shown} has {links} hard links: a link made inside the workdir can name any file "
        "on the same disk, so the file tools read only files with one link"
    )


def _numbered(path: Path, shown: str, offset: int, limit: int) -> str:
    """Lines offset..offset+limit-1 of the file, numbered like `cat -n`, with a closing note."""
    with os.fdopen(_open_regular(path, shown), "rb") as f:
        if b"\0" in f.read(BINARY_SNIFF_BYTES):
            raise ToolError(f"{shown} is a binary file")
        f.seek(0)
        out: list[str] = []
        size, note = 0, ""
        for number, raw in enumerate(f, start=1):
            if number < offset:
                continue
            if number >= offset + limit:
                note = f"(more lines follow; continue with offset={number})"
                break
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + " [line truncated]"
            entry = f"{number:>6}\t{line}"
            if size + len(entry) > MAX_OUTPUT_CHARS:
                note = f"(output cap reached; continue with offset={number})"
                break
            out.append(entry)
            size += len(entry) + 1
    if not out and not note:
        return "(empty file)" if offset == 1 else f"(the file has fewer than {offset} lines)"
    return "\n".join([*out, note] if note else out)


async def _read_file(ctx: ToolContext, args: ReadFileArgs) -> str:
    path = confine(ctx.workdir, args.path, for_write=False)
    shown = _display(path, _root(ctx))
    offset, limit = args.offset or 1, args.limit or DEFAULT_READ_LINES
    text = await asyncio.to_thread(_numbered, path, shown, offset, limit)
    return default_redactor().redact(text)


def _listing(path: Path, shown: str) -> str:
    if not path.is_dir():
        raise ToolError(f"{shown} is not a directory" if path.exists() else f"no such dir: {shown}")
    names = sorted(os.listdir(path))
    lines = []
    for name in names[:MAX_DIR_ENTRIES]:
        entry = path / name
        if entry.is_symlink():
            lines.append(f"{name} -> {os.readlink(entry)}")
        elif entry.is_dir():
            lines.append(f"{name}/")
        else:
            lines.append(name)
    if len(names) > MAX_DIR_ENTRIES:
        lines.append(f"({len(names) - MAX_DIR_ENTRIES} more entries not shown)")
    return "\n".join(lines) if lines else "(empty directory)"


async def _list_dir(ctx: ToolContext, args: ListDirArgs) -> str:
    path = confine(ctx.workdir, args.path, for_write=False)
    text = await asyncio.to_thread(_listing, path, _display(path, _root(ctx)))
    return default_redactor().redact(text)


def _candidate_files(
    start: Path, root: Path, glob: str | None, skipped: list[str]
) -> Iterator[Path]:
    """Regular files under `start`, no symlinks, no .git, no credentials, matching `glob`;
    files with several hard links are named in `skipped` instead."""
    if start.is_file():
        walk: Iterator[tuple[str, list[str], list[str]]] = iter(
            [(str(start.parent), [], [start.name])]
        )
    else:
        walk = os.walk(start, followlinks=False)
    for dirpath, dirnames, filenames in walk:
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = _display(path, root)
            if glob and not (fnmatch.fnmatch(name, glob) or fnmatch.fnmatch(rel, glob)):
                continue
            st = path.lstat()
            too_big = st.st_size > MAX_GREP_FILE_BYTES
            if not stat.S_ISREG(st.st_mode) or too_big or _refused(path, root):
                continue
            if st.st_nlink > 1:
                skipped.append(rel)
                continue
            yield path


def _refused(path: Path, root: Path) -> bool:
    """True for a file grep skips: a credential, or a file of swarmdeck's home."""
    return bool(credential_reason(path, root=root) or home_reason(path, root))


def _search_file(path: Path, rx: re.Pattern[str], rel: str, room: int) -> list[str]:
    """Up to `room` matching lines of one file as `file:line: text`; [] for a binary file."""
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return []
    hits = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if rx.search(line):
            text = line.strip()
            if len(text) > MAX_GREP_LINE_CHARS:
                text = text[:MAX_GREP_LINE_CHARS] + " [...]"
            hits.append(f"{rel}:{number}: {text}")
            if len(hits) >= room:
                break
    return hits


def _grep(start: Path, root: Path, rx: re.Pattern[str], glob: str | None) -> str:
    hits: list[str] = []
    skipped: list[str] = []
    for scanned, path in enumerate(_candidate_files(start, root, glob, skipped), 1):
        if scanned > MAX_GREP_FILES:
            hits.append(f"(stopped after {MAX_GREP_FILES} files; narrow path or glob)")
            break
        with contextlib.suppress(OSError):
            hits += _search_file(path, rx, _display(path, root), MAX_GREP_MATCHES + 1 - len(hits))
        if len(hits) > MAX_GREP_MATCHES:
            hits = [*hits[:MAX_GREP_MATCHES], f"(stopped at {MAX_GREP_MATCHES} matches)"]
            break
    if skipped:
        hits.append(f"(not searched, having several hard links: {', '.join(skipped[:20])})")
    return "\n".join(hits) if hits else "(no matches)"


async def _grep_tool(ctx: ToolContext, args: GrepArgs) -> str:
    try:
        rx = re.compile(args.pattern)
    except re.error as exc:
        raise ToolError(f"invalid regular expression: {exc}") from None
    start = confine(ctx.workdir, args.path, for_write=False)
    if not start.exists():
        raise ToolError(f"no such file or directory: {args.path}")
    text = await asyncio.to_thread(_grep, start, _root(ctx), rx, args.glob)
    return default_redactor().redact(text)


def _write(path: Path, data: bytes) -> None:
    """Replace `path` atomically, keeping the mode of the file it replaces."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        raise ToolError(f"{path.name} is a directory")
    try:
        mode = stat.S_IMODE(path.lstat().st_mode)
    except FileNotFoundError:
        mode = None
    replace_atomically(path, data, mode, suffix=".swarmdeck-tmp")


async def _write_file(ctx: ToolContext, args: WriteFileArgs) -> str:
    if ctx.read_only or ctx.mode not in WRITE_MODES:
        raise PermissionDeniedError(f"write_file is not allowed in {ctx.mode} mode (read-only)")
    data = args.content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolError(f"content is {len(data)} bytes, over the {MAX_WRITE_BYTES} byte cap")
    path = confine(ctx.workdir, args.path, for_write=True)
    shown = _display(path, _root(ctx))
    try:
        await asyncio.to_thread(_write, path, data)
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror}") from None
    lines = args.content.count("\n") + (
        1 if args.content and not args.content.endswith("\n") else 0
    )
    # The same text whether or not the file already held this content, so a rerun after a
    # crash reads exactly like the first run (the tool is idempotent).
    return f"wrote {shown} ({len(data)} bytes, {lines} lines)"


# Positional, in Tool's field order: name, description, arguments, effect, body (, modes).
READ_FILE = Tool(
    "read_file",
    "Read a text file, with line numbers (offset/limit page it).",
    ReadFileArgs, Effect.READ, _read_file,
)  # fmt: skip
LIST_DIR = Tool(
    "list_dir", "List a directory in the workdir (directories end with /).",
    ListDirArgs, Effect.READ, _list_dir,
)  # fmt: skip
GREP = Tool(
    "grep", "Search files under a path for a regular expression; prints file:line: text.",
    GrepArgs, Effect.READ, _grep_tool,
)  # fmt: skip
WRITE_FILE = Tool(
    "write_file", "Create or replace a file with the given content.",
    WriteFileArgs, Effect.IDEMPOTENT, _write_file, WRITE_MODES,
)  # fmt: skip
FILE_TOOLS: list[Tool] = [READ_FILE, LIST_DIR, GREP, WRITE_FILE]
