"""Every command's help reads like a well-kept CLI's at 80 and 120 columns: no line broken
mid-sentence (a hard break where the next word would have fit), no flag shown with a type
(typer printed `--dry-run <bool>`), and usage without doubled brackets (`[[TASK]]`)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer._click import Context

from swarmdeck.cli.app import _register, app


def _commands() -> Iterator[tuple[list[str], Any]]:
    _register()
    stack: list[tuple[list[str], Any]] = [(["swarmdeck"], typer.main.get_command(app))]
    while stack:
        path, command = stack.pop()
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            if not sub.hidden:
                stack.append(([*path, name], sub))


def _help(path: list[str], command: Any, width: int, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    parent = None
    for name in path[:-1]:
        parent = Context(typer.main.get_command(app), info_name=name, parent=parent)
    ctx = Context(command, info_name=path[-1], parent=parent, terminal_width=width)
    return command.get_help(ctx)


def _hard_breaks(text: str, width: int) -> list[str]:
    """Lines ended before the next line's first word, in the same column, would have fit."""
    lines = text.splitlines()
    found = []
    for line, after in itertools.pairwise(lines):
        if not line.strip() or not after.strip() or line.rstrip().endswith(":"):
            continue
        column = len(after) - len(after.lstrip())
        indent = len(line) - len(line.lstrip())
        # A continuation: deeper than the line's start (a definition list's help column),
        # or at the same indent in a paragraph (a list row has a two-space gap instead).
        continued = column > indent or "  " not in line.strip()
        same_block = continued and column < len(line) and line[column] != " "
        same_block = same_block and line[column - 1] == " "
        if same_block and len(line.rstrip()) + 1 + len(after.split()[0]) <= width - 2:
            found.append(f"{line!r} / {after!r}")
    return found


@pytest.mark.parametrize("width", [80, 120])
def test_every_help_reads_cleanly(width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    problems = []
    for path, command in _commands():
        text = _help(path, command, width, monkeypatch)
        where = " ".join(path)
        problems += [f"{where}: broken {b}" for b in _hard_breaks(text, min(width, 80))]
        problems += [f"{where}: {u}" for u in re.findall(r"\[\[\w+\]\]|\{\w+\}", text)]
        for param in command.params:
            if getattr(param, "is_flag", False) and not param.hidden:
                for opt in param.opts:
                    if re.search(rf"{re.escape(opt)}(?:\s*/\s*--[\w-]+)? <", text):
                        problems.append(f"{where}: flag {opt} shown with a type")
        assert any(len(line) > 40 for line in text.splitlines()), where
    assert not problems, "\n".join(problems)
