"""The `swarmdeck` command: one typer app, one error edge that prints one line."""

from __future__ import annotations

import os
import sys

import typer

from swarmdeck.cli.help_format import HelpGroup, use_plain_help
from swarmdeck.errors import SwarmdeckError

app = typer.Typer(
    name="swarmdeck",
    cls=HelpGroup,
    rich_markup_mode=None,
    help="Durable LLM agent sessions, and bounded tasks dispatched to isolated LLM workers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


# The module that registers each command: a command needs only its own module imported,
# and a planner's `dispatch` should not wait for the others (the fleet path's start-up
# must stay well under a second).
COMMAND_MODULES = {
    "agents": "agents",
    "artifacts": "artifacts",
    "demo": "demo",
    "dispatch": "dispatch",
    "fanout": "dispatch",
    "template": "dispatch",
    "fake-llm": "fake_llm",
    "init": "init",
    "uninstall": "init",
    "key": "keys",
    "maintain": "maintain",
    "mcp": "mcp",
    "memory": "memory",
    "portal": "portal",
    "provider": "providers",
    "run": "run",
    "runner": "runner",
    "sessions": "sessions",
    "skills": "skills",
    "status": "status",
    "swarm": "swarm",
    "system": "system",
    "team": "team",
    "tui": "tui",
    "usage": "usage",
    "worker": "worker",
    "workers": "workers",
}


@app.callback()
def _group() -> None:
    # A callback keeps `swarmdeck NAME` a group even when only NAME's module is registered.
    pass


def _register(argv: list[str] | None = None) -> None:
    """Import the module of the command named on the command line (all of them for the
    top-level help, an unknown name or no command line); command modules register
    themselves on import."""
    import importlib

    name = next((a for a in argv or [] if not a.startswith("-")), None)
    modules = [COMMAND_MODULES[name]] if name in COMMAND_MODULES else COMMAND_MODULES.values()
    for module in dict.fromkeys(modules):
        importlib.import_module(f"swarmdeck.cli.{module}")
    use_plain_help(app)


def _fail(message: str, code: int) -> None:
    print(f"swarmdeck: error: {message}", file=sys.stderr)
    sys.exit(code)


def main() -> None:
    """Entry point: run the app; turn every error into one line and an exit code."""
    from typer._click import exceptions as click_errors

    _register(sys.argv[1:])
    try:
        code = app(standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _fail("interrupted", 130)
    except click_errors.NoArgsIsHelpError:
        sys.exit(2)  # the help text was printed already
    except click_errors.ClickException as exc:
        _fail(exc.format_message().replace("\n", " "), 2)
    except SwarmdeckError as exc:
        _fail(exc.one_line(), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as exc:
        if os.environ.get("SWARMDECK_DEBUG"):
            raise
        if (known := known_error(exc)) is not None:
            _fail(known.one_line(), known.exit_code)
        _fail(
            f"internal error: {type(exc).__name__}: {exc} "
            "(rerun with SWARMDECK_DEBUG=1 for the traceback, and please report it)",
            1,
        )
    # Without standalone mode, typer returns a command's exit code instead of raising it.
    sys.exit(code if isinstance(code, int) else 0)


def known_error(exc: Exception) -> SwarmdeckError | None:
    """An error from below that a user can act on, said as one (a store another process
    keeps locked); None for a defect."""
    from swarmdeck.catalog.db import locked_store_error
    from swarmdeck.config import home_dir, store_url_of

    return locked_store_error(exc, store_url_of(home_dir()))
