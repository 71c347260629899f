"""Keys a tool printed one piece per line: hex dumps (`xxd`, `xxd -p`, `hexdump`, `od`) and
wrapped base64 (`base64` wraps at 76 columns). A plain search misses them because offsets,
columns and line breaks cut the key apart; here each run of dump lines is read back into
the bytes (or base64 text) it shows, searched, and the lines that show a key are masked."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

REDACTED = "[REDACTED]"

# A cheap test first: redact() runs on every text, and almost none is a dump. Each try
# starts at a literal newline, which the engine finds fast (a multiline `^` would make it
# try the alternatives at every position).
_DUMPISH = re.compile(
    r"\n(?:[0-9a-f]{7,8}[: ]|(?: {1,3}\S{1,3}){4}|[A-Za-z0-9+/=_-]{16,}[ \t\r]*(?=\n|\Z))"
)
_XXD = re.compile(r"^[0-9a-f]{8}: ((?:[0-9a-f]{2,16} )*[0-9a-f]{2,16})(?:  |$)")
_HEX_C = re.compile(r"^[0-9a-f]{8}  ((?:[0-9a-f]{2} {1,2})*[0-9a-f]{2}) +\|")
_WORDS_HEX = re.compile(r"^[0-9a-f]{7}((?: [0-9a-f]{4})+)\s*$")
_WORDS_OCT = re.compile(r"^[0-7]{7}((?: [0-7]{6})+)\s*$")
# Four columns a field, so the alternatives never overlap (no backtracking blow-up).
_OD_CHARS = re.compile(r"^(?:[0-7]{7})?((?:    |   \S|  \S\S| \S\S\S)+)\s*$")
# The last line of a run may be short, so any length counts once the run has begun.
_HEX_PLAIN = re.compile(r"^((?:[0-9a-fA-F]{2})+)\s*$")
_BASE64 = re.compile(r"^([A-Za-z0-9+/_-]+={0,2})\s*$")
_OD_ESCAPES = {"\\0": 0, "\\a": 7, "\\b": 8, "\\f": 12, "\\n": 10, "\\r": 13, "\\t": 9, "\\v": 11}


def _hex_groups(groups: str) -> bytes:
    """xxd's and hexdump -C's columns: big-endian groups of hex digits."""
    return bytes.fromhex(groups.replace(" ", ""))


def _little_endian_words(words: Iterable[int]) -> bytes:
    """od's and hexdump's default: 16-bit words printed least significant byte first."""
    return b"".join(word.to_bytes(2, "little") for word in words)


def _od_chars(fields: str) -> bytes:
    """`od -c`: one right-aligned four-column field per byte (a blank field is a space)."""
    out = bytearray()
    for i in range(0, len(fields), 4):
        token = fields[i : i + 4].strip() or " "
        if token in _OD_ESCAPES:
            out.append(_OD_ESCAPES[token])
        elif len(token) == 3 and token.isdigit():
            out.append(int(token, 8) & 0xFF)
        elif token == "\\\\":
            out.append(0x5C)
        else:
            out += token.encode("utf-8", "replace")
    return bytes(out)


# Each dump layout: its line pattern and how one line's captured column becomes bytes.
_LAYOUTS: tuple[tuple[re.Pattern[str], Callable[[str], bytes]], ...] = (
    (_XXD, _hex_groups),
    (_HEX_C, _hex_groups),
    (_WORDS_HEX, lambda col: _little_endian_words(int(w, 16) for w in col.split())),
    (_WORDS_OCT, lambda col: _little_endian_words(int(w, 8) for w in col.split())),
    (_OD_CHARS, _od_chars),
    (_HEX_PLAIN, bytes.fromhex),
)


@dataclass
class _Run:
    """Consecutive lines of one layout: what they show, and where each line's part starts."""

    shown: bytes
    starts: list[int]  # offset in `shown` where each line's part begins
    lines: list[int]  # index of each line in the text


def _runs(lines: list[str], pattern: re.Pattern[str], decode: Callable[[str], bytes]):
    """Every run of consecutive lines that read as `pattern`, decoded."""
    run: _Run | None = None
    for index, line in enumerate(lines):
        match = pattern.match(line)
        part = None
        if match is not None:
            try:
                part = decode(match.group(1))
            except ValueError:
                part = None
        if part is None:
            if run is not None:
                yield run
            run = None
            continue
        if run is None:
            run = _Run(b"", [], [])
        run.starts.append(len(run.shown))
        run.lines.append(index)
        run.shown += part
    if run is not None:
        yield run


def _lines_holding(run: _Run, needle: bytes) -> set[int]:
    """The text lines over which `needle` shows in the run, at each place it does."""
    hit: set[int] = set()
    pos = run.shown.find(needle)
    while pos >= 0:
        end = pos + len(needle)
        for i, start in enumerate(run.starts):
            stop = run.starts[i + 1] if i + 1 < len(run.starts) else len(run.shown)
            if start < end and stop > pos:
                hit.add(run.lines[i])
        pos = run.shown.find(needle, pos + 1)
    return hit


def mask_dumps(text: str, secrets: Iterable[bytes], base64_forms: Iterable[str]) -> str:
    """`text` with every dump line that shows part of a secret replaced by [REDACTED]."""
    secrets, base64_forms = tuple(secrets), tuple(base64_forms)
    if not secrets or "\n" not in text or len(_DUMPISH.findall("\n" + text)) < 2:
        return text
    lines = text.split("\n")
    masked: set[int] = set()
    for pattern, decode in _LAYOUTS:
        for run in _runs(lines, pattern, decode):
            for secret in secrets:
                masked |= _lines_holding(run, secret)
    for run in _runs(lines, _BASE64, str.encode):
        for form in base64_forms:
            masked |= _lines_holding(run, form.encode())
    if not masked:
        return text
    return "\n".join(REDACTED if i in masked else line for i, line in enumerate(lines))
