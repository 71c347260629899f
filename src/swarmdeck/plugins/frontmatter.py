"""Split a Markdown file into its YAML front matter and its body.

Real files are not always tidy: PilotSwarm shipped one SKILL.md wrapped in a
```` ````skill ```` fence, which is unwrapped here so it loads like the others.
"""

from __future__ import annotations

import re

FENCE_OPEN = re.compile(r"^(`{3,}|~{3,})[A-Za-z0-9_-]*[ \t]*\n")


def unwrap_fence(text: str) -> str:
    """The text inside a fence that wraps the whole file, else the text as it is."""
    stripped = text.strip("\n")
    match = FENCE_OPEN.match(stripped)
    if match is None:
        return text
    fence = match.group(1)
    lines = stripped.splitlines()
    if len(lines) < 2 or lines[-1].strip() != fence:
        return text
    return "\n".join(lines[1:-1]) + "\n"


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(front matter text, body); None when the file has no front matter block.

    The block opens with a `---` line as the file's first line and closes at the next line
    that is exactly `---`; ValueError when it never closes.
    """
    text = unwrap_fence(text.lstrip("\ufeff"))
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        return None, text
    for i in range(1, len(lines)):
        if lines[i].rstrip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    raise ValueError("front matter opened with '---' is never closed")


BLOCK_START = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_-]+):\s*[|>][-+0-9]*\s*$")


def repair_block_scalars(front: str) -> tuple[str, list[str]]:
    """Re-indent lines of a `key: |` block that are indented less than the block's first
    line but still more than its key (PilotSwarm shipped ASCII-art splashes like that, and
    its loader took them). Returns the text and the keys whose blocks were repaired."""
    lines = front.splitlines()
    repaired: list[str] = []
    i = 0
    while i < len(lines):
        match = BLOCK_START.match(lines[i])
        i += 1
        if match is None:
            continue
        parent = len(match.group("indent"))
        block_indent: int | None = None
        while i < len(lines):
            line = lines[i]
            if not line.strip():
                i += 1
                continue
            indent = len(line) - len(line.lstrip(" "))
            if indent <= parent:
                break
            if block_indent is None:
                block_indent = indent
            elif indent < block_indent:
                lines[i] = " " * (block_indent - indent) + line
                if match.group("key") not in repaired:
                    repaired.append(match.group("key"))
            i += 1
    return "\n".join(lines) + "\n", repaired
