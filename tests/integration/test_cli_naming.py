"""One naming scheme across the command line: groups list with `ls`, show with `show` and
remove with `rm`; the step cap is `--max-turns`. Old spellings keep working, out of the
help."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import typer

from swarmdeck.cli.app import COMMAND_MODULES, _register, app
from tests.conftest import in_parallel, run_cli

# Names that mean ls, show or rm in another spelling.
STRAGGLERS = {"list", "remove", "delete", "del", "info", "describe", "get-all", "inspect"}


def _groups() -> dict[str, dict[str, object]]:
    _register()
    root = typer.main.get_command(app)
    found: dict[str, dict[str, object]] = {}

    def walk(group: object, path: str) -> None:
        commands = getattr(group, "commands", None)
        if commands is None:
            return
        found[path or "swarmdeck"] = commands
        for name, sub in commands.items():
            walk(sub, f"{path} {name}".strip())

    walk(root, "")
    return found


def test_no_group_spells_ls_show_or_rm_another_way() -> None:
    for group, commands in _groups().items():
        visible = {name for name, cmd in commands.items() if not getattr(cmd, "hidden", False)}
        assert not visible & STRAGGLERS, (group, sorted(visible & STRAGGLERS))
    worktrees = _groups()["maintain worktrees"]
    assert {n for n, c in worktrees.items() if not getattr(c, "hidden", False)} == {"ls", "rm"}


def test_every_command_is_registered_by_importing_its_module_alone() -> None:
    # The CLI imports only the invoked command's module: one missing from the map would
    # make its invocation import every module (and pay the others' start-up).
    _register()
    assert set(typer.main.get_command(app).commands) == set(COMMAND_MODULES)


def test_old_names_still_work_but_are_not_advertised(sd_home: Path, tmp_path: Path) -> None:
    nope = str(tmp_path / "nope")
    calls = {
        "help": partial(run_cli, sd_home, "maintain", "worktrees", "--help"),
        "list": partial(run_cli, sd_home, "maintain", "worktrees", "list"),
        "ls": partial(run_cli, sd_home, "maintain", "worktrees", "ls"),
        "rm": partial(run_cli, sd_home, "maintain", "worktrees", "rm", nope),
        "remove": partial(run_cli, sd_home, "maintain", "worktrees", "remove", nope),
        "run": partial(run_cli, sd_home, "run", "--help", COLUMNS="200"),
        "dispatch": partial(run_cli, sd_home, "dispatch", "--help", COLUMNS="200"),
    }
    results = in_parallel(calls)
    listed = [line.strip("│ ").split(" ", 1)[0] for line in results["help"].stdout.splitlines()]
    assert "ls" in listed and "rm" in listed
    assert "list" not in listed and "remove" not in listed
    assert results["list"].stdout.strip() == results["ls"].stdout.strip() == "no worktrees"
    for name in ("rm", "remove"):
        res = results[name]
        assert res.code == 2 and "is not a swarmdeck worktree" in res.stderr, (name, res.stderr)
    for command in ("run", "dispatch"):
        text = results[command].stdout
        assert "--max-turns" in text and "--max-steps" not in text, command


def test_help_paragraphs_fill_a_narrow_terminal(sd_home: Path) -> None:
    # Typer keeps the line breaks of a help's later paragraphs: at 80 columns, a source line
    # of 92 came out as a full line and a stub.
    shown = run_cli(sd_home, "run", "--help", COLUMNS="80")
    assert shown.code == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "handed to it and followed from here; else, or with --local" in text
    lines = [line.strip() for line in shown.stdout.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("When a worker"))
    paragraph = lines[start : lines.index("", start)]
    assert len(paragraph) >= 2 and all(len(line) > 60 for line in paragraph[:-1]), paragraph
