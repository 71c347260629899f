"""The `swarmdeck` command: one typer app, one error edge that prints one line."""

from __future__ import annotations

import os
import sys

import typer

from swarmdeck.errors import SwarmdeckError

app = typer.Typer(
    name="swarmdeck",
    help="Durable LLM agent sessions, and bounded tasks dispatched to isolated LLM workers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _register() -> None:
    # Command modules register themselves on import; kept here so `app` has them all.
    from swarmdeck.cli import (  # noqa: F401
        agents,
        artifacts,
        demo,
        dispatch,
        fake_llm,
        init,
        keys,
        maintain,
        mcp,
        providers,
        run,
        sessions,
        skills,
        status,
        system,
        usage,
        worker,
    )


def _fail(message: str, code: int) -> None:
    print(f"swarmdeck: error: {message}", file=sys.stderr)
    sys.exit(code)


def main() -> None:
    """Entry point: run the app; turn every error into one line and an exit code."""
    from typer._click import exceptions as click_errors

    _register()
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
        _fail(
            f"internal error: {type(exc).__name__}: {exc} "
            "(rerun with SWARMDECK_DEBUG=1 for the traceback, and please report it)",
            1,
        )
    # Without standalone mode, typer returns a command's exit code instead of raising it.
    sys.exit(code if isinstance(code, int) else 0)
