"""A text file as the edit tools see it: its text with `\\n` line endings, and how to write
it back as it was (encoding, byte-order mark, CRLF); and a short diff of a change."""

from __future__ import annotations

import codecs
import difflib
import os
from dataclasses import dataclass
from pathlib import Path

from swarmdeck.errors import ToolError
from swarmdeck.tools.builtins.files import BINARY_SNIFF_BYTES, _open_regular

_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
DIFF_LINES = 30


@dataclass(frozen=True)
class TextFile:
    """A file's text (`\\n` line endings) and the form it is stored in."""

    text: str
    raw: bytes
    encoding: str = "utf-8"
    bom: bytes = b""
    crlf: bool = False

    def encode(self, text: str, shown: str) -> bytes:
        """`text` in this file's encoding, BOM and line endings."""
        if self.crlf:
            text = text.replace("\n", "\r\n")
        try:
            return self.bom + text.encode(self.encoding)
        except UnicodeEncodeError as exc:
            raise ToolError(
                f"{shown} is {self.encoding}, which cannot hold {exc.object[exc.start]!r}"
            ) from None


def decode(data: bytes, shown: str) -> TextFile:
    """Read bytes as text, remembering the encoding and whether every line ends in CRLF."""
    bom, encoding = next(((b, e) for b, e in _BOMS if data.startswith(b)), (b"", ""))
    body = data[len(bom) :]
    if not bom and b"\0" in body[:BINARY_SNIFF_BYTES]:
        raise ToolError(f"{shown} is a binary file")
    if not encoding:
        try:
            body.decode("utf-8")
            encoding = "utf-8"
        except UnicodeDecodeError:
            encoding = "latin-1"  # any bytes; unchanged bytes are written back unchanged
    text = body.decode(encoding)
    crlf = "\r\n" in text and text.count("\r\n") == text.count("\n")
    if crlf:
        text = text.replace("\r\n", "\n")
    return TextFile(text, data, encoding, bom, crlf)


def read_text(path: Path, shown: str) -> TextFile:
    """A file of the workdir (no symlink, one hard link, a regular file) as text."""
    with os.fdopen(_open_regular(path, shown), "rb") as f:
        return decode(f.read(), shown)


def diff_excerpt(shown: str, before: str, after: str) -> str:
    """A short unified diff of a change (without the file header lines)."""
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), n=2, lineterm=""))[
        2:
    ]
    if len(lines) > DIFF_LINES:
        lines = [*lines[:DIFF_LINES], f"({len(lines) - DIFF_LINES} more diff lines of {shown})"]
    return "\n".join(lines)
