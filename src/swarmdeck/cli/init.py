"""`swarmdeck init claude|codex` and `swarmdeck uninstall claude|codex`: planner playbooks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from swarmdeck.cli.app import app
from swarmdeck.cli.dispatch import HumanCommand
from swarmdeck.errors import UsageError

HostArg = Annotated[str, typer.Argument(help="claude or codex.")]
TargetOpt = Annotated[
    Path | None,
    typer.Option(
        "--target", help="Base directory instead of ~/.claude or ~/.codex (e.g. ./.claude)."
    ),
]


def _parse_routes(values: list[str]) -> dict[str, str]:
    routes = {}
    for value in values:
        mode, sep, provider = value.partition("=")
        if not sep or not mode or not provider:
            raise UsageError(f"bad --route {value!r}", "write MODE=PROVIDER, e.g. review=anthropic")
        routes[mode.strip()] = provider.strip()
    return routes


@app.command(cls=HumanCommand)
def init(
    host: HostArg,
    target: TargetOpt = None,
    route: Annotated[
        list[str] | None,
        typer.Option("--route", help="MODE=PROVIDER: the first choice for a mode; repeatable."),
    ] = None,
    mcp: Annotated[
        bool,
        typer.Option(
            "--mcp/--no-mcp",
            help="Also register `swarmdeck mcp serve` in the host's MCP configuration "
            "(~/.claude.json, or .mcp.json beside --target; ~/.codex/config.toml).",
        ),
    ] = True,
) -> None:
    """Write (or update in place) the swarmdeck playbook skill for a planner host, and
    register swarmdeck's MCP server with it."""
    from swarmdeck.config import load_settings
    from swarmdeck.dispatch.host_skills import install

    done = install(host, target, load_settings(), _parse_routes(route or []))
    verb = "updated" if done.updated else "wrote"
    print(f"{verb} {done.path / 'SKILL.md'} and {len(done.files) - 1} mode notes")
    if mcp:
        from swarmdeck.dispatch.host_mcp import register

        reg = register(host, target)
        state = "registered" if reg.changed else "already registered"
        print(f"{state} `swarmdeck mcp serve` in {reg.path}")
    if done.providers:
        print(f"providers routed: {', '.join(done.providers)}")
    else:
        print(
            "swarmdeck: warning: no provider is configured yet; run `swarmdeck key set "
            "PROVIDER`, then `swarmdeck init` again",
            file=sys.stderr,
        )


@app.command(cls=HumanCommand)
def uninstall(host: HostArg, target: TargetOpt = None) -> None:
    """Remove the playbook skill and the MCP server entry `swarmdeck init` wrote."""
    from swarmdeck.dispatch.host_mcp import unregister
    from swarmdeck.dispatch.host_skills import uninstall as remove

    where = remove(host, target)
    print(f"removed {where}" if where else "nothing to remove: no swarmdeck skill installed")
    config = unregister(host, target)
    if config is not None:
        print(f"removed the swarmdeck MCP server from {config}")
