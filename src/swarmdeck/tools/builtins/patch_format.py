"""The Codex patch format (`*** Begin Patch` ... `*** End Patch`): parsed into file
operations, and update hunks applied to a file's lines.

Written from the format's published description (openai/codex, codex-rs/apply-patch:
apply_patch_tool_instructions.md and its Lark grammar, in models/edit_shapes.py); no maintained parser exists on
PyPI. Its rules, kept as Codex applies them: a hunk is found by its context and removed
lines, searched from where the previous hunk ended, exactly first, then ignoring trailing
whitespace, then ignoring surrounding whitespace, then with typographic punctuation read as
ASCII; `@@ text` first moves past the next line matching `text`; a hunk with no context and
no removed lines is appended at the end of the file.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from swarmdeck.errors import ToolError

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"


class PatchError(ToolError):
    """A patch that does not parse, or a hunk that does not apply; the message names it."""


@dataclass
class Hunk:
    """One `@@` section of an update: where to look, the lines it replaces and their new form."""

    anchor: str | None = None
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    at_end: bool = False


@dataclass
class FileOp:
    """One file operation of a patch: kind is "add", "delete" or "update"."""

    kind: str
    path: str
    contents: str = ""  # the new file's text (add)
    move_to: str | None = None  # the new name (update)
    hunks: list[Hunk] = field(default_factory=list)


def parse_patch(text: str) -> list[FileOp]:
    """The operations of a patch, or PatchError naming the line that is wrong."""
    lines = [line.removesuffix("\r") for line in text.strip().split("\n")]
    if lines and lines[0].strip() in ("<<EOF", "<<'EOF'", '<<"EOF"') and lines[-1].endswith("EOF"):
        lines = lines[1:-1]  # a heredoc around the patch, as models sometimes write it
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError(f"the first line of the patch must be '{BEGIN}'")
    if len(lines) < 2 or lines[-1].strip() != END:
        raise PatchError(f"the last line of the patch must be '{END}'")
    body, ops, number = lines[1:-1], [], 2
    while body:
        op, used = _parse_op(body, number)
        ops.append(op)
        body, number = body[used:], number + used
    if not ops:
        raise PatchError("the patch has no file operations")
    return ops


def _parse_op(lines: list[str], number: int) -> tuple[FileOp, int]:
    """The file operation at the head of `lines` and how many lines it used."""
    head = lines[0].strip()
    if head.startswith(ADD):
        added = []
        for line in lines[1:]:
            if not line.startswith("+"):
                break
            added.append(line[1:] + "\n")
        return FileOp("add", head[len(ADD) :], contents="".join(added)), 1 + len(added)
    if head.startswith(DELETE):
        return FileOp("delete", head[len(DELETE) :]), 1
    if head.startswith(UPDATE):
        return _parse_update(lines, number, head[len(UPDATE) :])
    raise PatchError(
        f"line {number}: {head!r} is not a file header; use '{ADD}path', '{DELETE}path' "
        f"or '{UPDATE}path'"
    )


def _parse_update(lines: list[str], number: int, path: str) -> tuple[FileOp, int]:
    op, used = FileOp("update", path), 1
    if len(lines) > 1 and lines[1].startswith(MOVE):
        op.move_to, used = lines[1][len(MOVE) :].strip(), 2
    while used < len(lines):
        line = lines[used]
        if not line.strip() and not op.hunks:
            used += 1
            continue
        if line.startswith("*"):
            break
        hunk, taken = _parse_hunk(lines[used:], number + used, first=not op.hunks)
        op.hunks.append(hunk)
        used += taken
    if not op.hunks:
        raise PatchError(f"line {number}: '{UPDATE}{path}' has no hunks")
    return op, used


def _parse_hunk(lines: list[str], number: int, *, first: bool) -> tuple[Hunk, int]:
    """One hunk: an optional `@@` line, then context, removed and added lines."""
    hunk, start = Hunk(), 0
    if lines[0].strip() == "@@":
        start = 1
    elif lines[0].startswith("@@ "):
        hunk.anchor, start = lines[0][3:], 1
    elif not first:
        raise PatchError(f"line {number}: a hunk must start with '@@', got {lines[0]!r}")
    taken = 0
    for line in lines[start:]:
        if line == END_OF_FILE:
            hunk.at_end, taken = True, taken + 1
            break
        marker, rest = line[:1], line[1:]
        if marker in ("", " "):
            hunk.old.append(rest)
            hunk.new.append(rest)
        elif marker == "-":
            hunk.old.append(rest)
        elif marker == "+":
            hunk.new.append(rest)
        elif taken == 0:
            raise PatchError(
                f"line {number + start}: {line!r}: every line of a hunk starts with ' ' "
                "(context), '-' (removed) or '+' (added)"
            )
        else:
            break
        taken += 1
    if taken == 0:
        raise PatchError(f"line {number}: the hunk has no lines")
    return hunk, start + taken


_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys("\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a", " "),
        **dict.fromkeys("\u202f\u205f\u3000", " "),
    }
)
_LOOSENESS = (
    lambda s: s,
    str.rstrip,
    str.strip,
    lambda s: s.strip().translate(_PUNCTUATION),
)


def seek(lines: list[str], pattern: list[str], start: int, at_end: bool = False) -> int | None:
    """Where `pattern` starts in `lines` at or after `start`, trying looser matches in turn."""
    if not pattern:
        return start
    last = len(lines) - len(pattern)
    if last < 0:
        return None
    first = last if at_end else start
    for loosen in _LOOSENESS:
        wanted = [loosen(p) for p in pattern]
        for i in range(first, last + 1):
            if all(loosen(lines[i + k]) == w for k, w in enumerate(wanted)):
                return i
    return None


def apply_hunks(lines: list[str], hunks: list[Hunk], path: str) -> list[str]:
    """The file's lines after the hunks, or PatchError naming the hunk that did not match."""
    replacements: list[tuple[int, int, list[str]]] = []
    cursor = 0
    for number, hunk in enumerate(hunks, 1):
        where = f"hunk {number} of {path}"
        if hunk.anchor is not None:
            found = seek(lines, [hunk.anchor], cursor)
            if found is None:
                raise PatchError(f"{where}: its '@@ {hunk.anchor}' line is not in the file")
            cursor = found + 1
        if not hunk.old:
            replacements.append((len(lines), 0, hunk.new))
            continue
        old, new = hunk.old, hunk.new
        found = seek(lines, old, cursor, hunk.at_end)
        if found is None and old[-1] == "":
            # A trailing empty context line stands for the file's last newline.
            old, new = old[:-1], new[:-1] if new and new[-1] == "" else new
            found = seek(lines, old, cursor, hunk.at_end)
        if found is None:
            raise PatchError(_no_match(where, lines, hunk.old, cursor))
        replacements.append((found, len(old), new))
        cursor = found + len(old)
    out = list(lines)
    for start, length, new in sorted(replacements, key=lambda r: r[0], reverse=True):
        out[start : start + length] = new
    return out


def _no_match(where: str, lines: list[str], old: list[str], cursor: int) -> str:
    """Why a hunk did not apply: the lines it looked for, and the nearest lines there are."""
    message = f"{where} did not apply: these lines are not in the file"
    message += f" after line {cursor}" if cursor else ""
    message += ":\n" + "\n".join(old) + nearest(lines, old)
    return message + "\nread the file again and make the hunk's context match it"


def nearest(lines: list[str], wanted: list[str]) -> str:
    """The run of lines most like `wanted`, as a note to add to an error ("" if none is)."""
    text = "\n".join(wanted)
    best, best_at = 0.0, -1
    for i in range(max(0, len(lines) - len(wanted) + 1)):
        matcher = difflib.SequenceMatcher(None, text, "\n".join(lines[i : i + len(wanted)]), False)
        if matcher.real_quick_ratio() > best and matcher.quick_ratio() > best:
            ratio = matcher.ratio()
            if ratio > best:
                best, best_at = ratio, i
    if best < 0.5:
        return ""
    near = "\n".join(lines[best_at : best_at + len(wanted)])
    return f"\nnearest (line {best_at + 1}, {best:.0%} alike):\n{near}"


def patch_from_texts(path: str, old: str, new: str, context: int = 3) -> str:
    """An update patch turning `old` into `new` (both ending with a newline), each hunk
    given enough context to be found where it belongs."""
    a, b = old.splitlines(), new.splitlines()
    out = [BEGIN, f"{UPDATE}{path}"]
    cursor = 0
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        # (difflib leaves empty "equal" ops at the edges of a group without context.)
        ops = [list(op) for op in group if op[0] != "equal" or op[1] < op[2]]
        if a and all(op[0] == "insert" for op in ops):
            # A hunk with no old line is appended at the end: anchor it on a line of its own.
            i, j = ops[0][1], ops[0][3]
            if i > cursor:
                ops.insert(0, ["equal", i - 1, i, j - 1, j])
            else:
                ops.append(["equal", i, i + 1, ops[-1][4], ops[-1][4] + 1])
        end = ops[-1][2]
        # Widen the leading context until the first match from the cursor is this place.
        while ops[0][1] > cursor and seek(a, a[ops[0][1] : end], cursor) != ops[0][1]:
            if ops[0][0] != "equal":
                ops.insert(0, ["equal", ops[0][1], ops[0][1], ops[0][3], ops[0][3]])
            ops[0][1] -= 1
            ops[0][3] -= 1
        out.append("@@")
        for tag, i1, i2, j1, j2 in ops:
            if tag == "equal":
                out += [f" {line}" for line in a[i1:i2]]
            else:
                out += [f"-{line}" for line in a[i1:i2]]
                out += [f"+{line}" for line in b[j1:j2]]
        cursor = end
    out.append(END)
    return "\n".join(out) + "\n"
