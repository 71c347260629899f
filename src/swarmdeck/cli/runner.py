"""`swarmdeck runner`: install, remove and show the external runners (issue 33)."""

from __future__ import annotations

import json
import shutil
from typing import Annotated

import typer

from swarmdeck.cli.app import app
from swarmdeck.config import load_settings

runner_app = typer.Typer(
    help="Install, remove and show external runners (opencode, claude, codex).",
    no_args_is_help=True,
)
app.add_typer(runner_app, name="runner")

NameArg = Annotated[str, typer.Argument(help="Runner name: opencode, claude or codex.")]


@runner_app.command("install")
def install_runner(name: NameArg) -> None:
    """Install a runner's pinned version from npm into <home>/runners/NAME."""
    from swarmdeck.runners import install

    state = install.install(load_settings().home, name)
    print(json.dumps({"runner": state.name, "installed": state.installed}))


@runner_app.command("uninstall")
def uninstall_runner(name: NameArg) -> None:
    """Remove a runner installed in swarmdeck's home."""
    from swarmdeck.runners import install

    removed = install.uninstall(load_settings().home, name)
    print(json.dumps({"runner": name, "removed": removed}))


@runner_app.command("status")
def runner_status(
    name: Annotated[str | None, typer.Argument(help="One runner; all when omitted.")] = None,
) -> None:
    """Show each runner: pinned version, installed version, and where its binary is."""
    from swarmdeck.runners import install
    from swarmdeck.runners.pins import PINS

    home = load_settings().home
    for each in [name] if name else sorted(PINS):
        state = install.status(home, each)
        where = str(state.binary) if state.binary else "not installed"
        line = f"{state.name:<9} pin {state.pinned:<9} {state.installed or '-':<9} {where}"
        if len(line) > shutil.get_terminal_size().columns:
            # A path is never cut: it goes on a line of its own.
            line = f"{line[: -len(where)].rstrip()}\n    {where}"
        print(line)
