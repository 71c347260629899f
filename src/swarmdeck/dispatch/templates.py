"""Task templates: `swarmdeck template MODE` prints one; the guard refuses unfilled ones."""

from __future__ import annotations

from importlib.resources import files

from swarmdeck.dispatch.modes import get_mode


def task_template(mode: str) -> str:
    """The task template of a mode, with `<FILL: ...>` placeholders to replace."""
    spec = get_mode(mode)
    body = (files("swarmdeck.dispatch") / "templates" / f"{spec.name}.md").read_text(
        encoding="utf-8"
    )
    return body if body.endswith("\n") else body + "\n"
