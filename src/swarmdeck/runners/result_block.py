"""The result block external runners end their text with, and how to read it back.

The block is checked by a validator the caller gives (the mode's schema): this layer sits
below the dispatch modes that define the schemas."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

BEGIN = "<!--SWARMDECK_RESULT_BEGIN-->"
END = "<!--SWARMDECK_RESULT_END-->"

ParseState = Literal["parsed", "malformed", "unstructured", "unavailable"]
# Models often wrap the JSON in a Markdown fence inside the block.
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(?P<body>.*)\n\s*```$", re.DOTALL)


@dataclass(frozen=True)
class BlockReading:
    """What the last result block of a text holds."""

    state: ParseState
    result: dict[str, Any] | None = None
    error: str | None = None


def render_block(result: dict[str, Any]) -> str:
    """A result as the block a runner appends to its final text."""
    return f"{BEGIN}\n{json.dumps(result, ensure_ascii=False, indent=2)}\n{END}"


def read_block(text: str | None, validate: Callable[[Any], str | None]) -> BlockReading:
    """Parse the last block of `text` and check it with `validate` (None: valid)."""
    text = text or ""
    begin = text.rfind(BEGIN)
    if begin < 0:
        return BlockReading("unavailable", error="no result was submitted")
    start = begin + len(BEGIN)
    end = text.find(END, start)
    if end < 0:
        return BlockReading(
            "unstructured", error="the result block was begun but cut off before its end marker"
        )
    raw = text[start:end].strip()
    fenced = _FENCE.match(raw)
    if fenced:
        raw = fenced.group("body").strip()
    try:
        result = json.loads(raw)
    except json.JSONDecodeError as exc:
        return BlockReading(
            "malformed",
            error=f"result: the result block is not valid JSON ({exc.msg} at line "
            f"{exc.lineno} column {exc.colno})",
        )
    problem = validate(result)
    if problem:
        return BlockReading("malformed", error=problem)
    return BlockReading("parsed", result=result)
