"""How the read model writes text for a narrow column: one line, an age. No store imports, so
the dispatch fleet path can use them without loading SQLAlchemy."""

from __future__ import annotations


def one_line(text: str) -> str:
    """Text on one line (runs of whitespace become one space)."""
    return " ".join(text.split())


def age(seconds: float) -> str:
    """A duration as a person reads an age: 42s, 5m, 3h, 2d."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f}{unit}"
    return f"{seconds:.0f}s"


def hinted(text: str, hint: str, width: int) -> list[str]:
    """A line and its hint (what to do about it), for a screen `width` wide: on one line
    when both fit, else the hint on a line of its own, indented. A hint is never broken: it
    is often a command to copy (the text itself wraps between words)."""
    together = f"{text}  ({hint})"
    if len(together) <= width:
        return [together]
    import textwrap

    lines = textwrap.wrap(
        text, width=max(width, 20), break_long_words=False, break_on_hyphens=False
    )
    return [*lines, f"    → {hint}"]
