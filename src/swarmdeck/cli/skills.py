"""`swarmdeck skills`: the skills of every plugin tier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.cli.agents import JsonOpt, PluginOpt, WorkdirOpt, plugin_set
from swarmdeck.cli.app import app
from swarmdeck.errors import NotFoundError

skills_app = typer.Typer(help="List and show skills.", no_args_is_help=True)
app.add_typer(skills_app, name="skills")


@skills_app.command("ls")
def ls(workdir: WorkdirOpt = Path("."), plugin: PluginOpt = None, as_json: JsonOpt = False) -> None:
    """List the skills (the winner of each name across the tiers)."""
    found = sorted(plugin_set(workdir, plugin).skills.values(), key=lambda s: s.name)
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "name": s.name,
                        "description": s.description,
                        "tools": s.tools,
                        "tier": s.tier,
                        "plugin": s.plugin,
                        "path": str(s.path),
                    }
                    for s in found
                ]
            )
        )
        return
    table = Table(box=None, header_style="bold")
    for col in ("name", "tier", "plugin", "tools", "description"):
        table.add_column(col)
    for s in found:
        table.add_row(s.name, s.tier, s.plugin, str(len(s.tools)), s.description)
    Console().print(table)


@skills_app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="The skill's name.")],
    workdir: WorkdirOpt = Path("."),
    plugin: PluginOpt = None,
) -> None:
    """Show a skill: its tools and its body."""
    skill = plugin_set(workdir, plugin).skills.get(name)
    if skill is None:
        raise NotFoundError(f"no skill named {name}", "list them with `swarmdeck skills ls`")
    console = Console(highlight=False)
    console.print(f"[bold]{skill.name}[/]  {skill.path}  ({skill.tier} tier)")
    console.print(f"  {skill.description}", markup=False)
    if skill.tools:
        console.print(f"  tools: {', '.join(skill.tools)}")
    for key, value in skill.extra.items():
        console.print(f"  {key}: {value}  [yellow](unknown field, kept)[/]")
    console.print()
    console.print(skill.body, markup=False)
