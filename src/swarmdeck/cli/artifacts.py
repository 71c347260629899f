"""`swarmdeck artifacts`: fetch and list what sessions stored."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from swarmdeck.cli.app import app
from swarmdeck.cli.sessions import open_catalog
from swarmdeck.errors import NotFoundError, ToolError

artifacts_app = typer.Typer(help="Fetch and list session artifacts.", no_args_is_help=True)
app.add_typer(artifacts_app, name="artifacts")


@artifacts_app.command("get")
def get(
    link: Annotated[str, typer.Argument(help="artifact://SESSION/NAME")],
    output: Annotated[
        Path | None, typer.Option("-o", help="Write to this file instead of stdout.")
    ] = None,
) -> None:
    """Print an artifact (or write it to a file)."""
    from swarmdeck.tools.builtins.artifacts import load_artifact, parse_link

    try:
        session_id, name = parse_link(link)
        data = load_artifact(open_catalog(), session_id, name)
    except ToolError as exc:
        raise NotFoundError(exc.message, "list them with `swarmdeck artifacts ls SESSION`") from exc
    if output:
        output.write_bytes(data)
    else:
        sys.stdout.buffer.write(data)


@artifacts_app.command("ls")
def ls(session_id: Annotated[str, typer.Argument(help="Session id.")]) -> None:
    """List a session's artifacts."""
    from swarmdeck.tools.builtins.artifacts import link

    catalog = open_catalog()
    sid = catalog.resolve_session_id(session_id)
    for row in catalog.artifacts_of([sid]):
        print(f"{link(row['session_id'], row['name'])}\t{row['size']}")
