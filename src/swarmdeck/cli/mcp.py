"""`swarmdeck mcp`: serve swarmdeck to a planner over MCP, and list the MCP servers a
session in a workdir would get."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.cli.agents import JsonOpt, PluginOpt
from swarmdeck.cli.app import app
from swarmdeck.cli.dispatch import HumanCommand

mcp_app = typer.Typer(
    help="MCP: serve swarmdeck to a planner; list the MCP servers sessions get.",
    no_args_is_help=True,
)
app.add_typer(mcp_app, name="mcp")

WorkdirOpt = Annotated[
    Path, typer.Option("--workdir", "-C", help="The project whose .mcp.json files count.")
]


@mcp_app.command("serve", cls=HumanCommand)
def serve() -> None:
    """Serve dispatch, fanout, swarm, session_wait and the session tools over MCP on stdio."""
    from swarmdeck.integrations.mcp.server import build_server
    from swarmdeck.swarm.planner_api import SwarmPlannerApi

    api = SwarmPlannerApi()
    server = build_server(api)

    async def run() -> None:
        try:
            await server.run_stdio_async()
        finally:
            await api.close()

    import anyio

    anyio.run(run)


def _declared(workdir: Path, plugin: list[Path] | None):
    from swarmdeck.config import load_settings
    from swarmdeck.integrations.mcp.config import collect_servers
    from swarmdeck.plugins.tiers import load_plugin_set

    workdir = workdir.resolve()
    found = load_plugin_set(load_settings().home, workdir, plugin or [])
    return collect_servers(found.plugins, workdir)


@mcp_app.command("ls", cls=HumanCommand)
def ls(
    workdir: WorkdirOpt = Path("."),
    plugin: PluginOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The MCP servers declared for a workdir: transport, effect, default, where declared."""
    declared = _declared(workdir, plugin)
    rows = [
        {
            "name": s.name,
            "transport": s.entry.transport,
            "effect": s.entry.effect,
            "effects": s.entry.effects,
            "default": s.entry.default,
            "source": str(s.source),
        }
        for s in declared.servers.values()
    ]
    problems = [p.line() for p in declared.problems if p.level == "error"]
    if as_json:
        print(json.dumps({"servers": rows, "problems": problems}))
        return
    console = Console()
    if not rows:
        console.print(
            "no MCP servers declared (.mcp.json in the project, its .swarmdeck/, "
            "the swarmdeck home or a plugin)"
        )
    else:
        table = Table("name", "transport", "effect", "default", "declared in")
        for r in rows:
            effect = r["effect"] + (f" ({len(r['effects'])} per tool)" if r["effects"] else "")
            table.add_row(
                r["name"], r["transport"], effect, "yes" if r["default"] else "", r["source"]
            )
        console.print(table)
    for line in problems:
        Console(stderr=True).print(f"[red]error[/] {line}", highlight=False)


@mcp_app.command("show", cls=HumanCommand)
def show(
    name: Annotated[str, typer.Argument(help="The server's name in .mcp.json.")],
    workdir: WorkdirOpt = Path("."),
    plugin: PluginOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a server and list its tools as sessions see them: name, effect, modes."""
    from swarmdeck.config import load_settings
    from swarmdeck.errors import NotFoundError, UsageError
    from swarmdeck.integrations.mcp.connection import McpStartError
    from swarmdeck.integrations.mcp.toolset import McpPool, McpToolset
    from swarmdeck.secrets.store import CredentialStore

    declared = _declared(workdir, plugin)
    server = declared.servers.get(name)
    if server is None:
        why = "; ".join(p.line() for p in declared.problems_of(name))
        raise NotFoundError(
            f"no MCP server named {name}", why or "list them with `swarmdeck mcp ls`"
        )
    settings = load_settings()
    pool = McpPool(CredentialStore(settings.credentials_dir).get, settings.home / "logs" / "mcp")
    toolset = McpToolset(pool)

    async def listing():
        conn = pool.connection(server, workdir.resolve())
        try:
            listed = await conn.tools()
            return toolset.tools_of(conn, listed)
        except McpStartError as exc:
            raise UsageError(
                str(exc).removesuffix("; going on without it"),
                f"see its log: {settings.home / 'logs' / 'mcp' / (name + '.log')}",
            ) from None
        finally:
            await pool.close()

    tools, problems = asyncio.run(listing())
    rows = [
        {
            "name": t.name,
            "effect": str(t.effect),
            "read_only_modes": "explore" in t.modes,
            "description": t.description,
        }
        for t in tools
    ]
    if as_json:
        print(json.dumps({"server": name, "tools": rows, "problems": problems}))
        return
    table = Table("tool", "effect", "in read-only modes", "description")
    for r in rows:
        table.add_row(
            r["name"],
            r["effect"],
            "yes" if r["read_only_modes"] else "no",
            r["description"].splitlines()[0][:60] if r["description"] else "",
        )
    Console().print(table)
    for line in problems:
        Console(stderr=True).print(f"[red]{line}[/]", highlight=False)
