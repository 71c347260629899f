"""`swarmdeck skills`: the skills of every plugin tier."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from swarmdeck.cli.agents import JsonOpt, PluginOpt, WorkdirOpt, plugin_set, print_listing
from swarmdeck.cli.app import app
from swarmdeck.errors import NotFoundError

skills_app = typer.Typer(help="List and show skills.", no_args_is_help=True)
app.add_typer(skills_app, name="skills")


@skills_app.command("ls")
def ls(workdir: WorkdirOpt = Path("."), plugin: PluginOpt = None, as_json: JsonOpt = False) -> None:
    """List the skills (the winner of each name across the tiers)."""
    rows = [
        {
            "name": s.name,
            "description": s.description,
            "tools": s.tools,
            "tool_count": len(s.tools),
            "tier": s.tier,
            "plugin": s.plugin,
            "path": str(s.path),
        }
        for s in sorted(plugin_set(workdir, plugin).skills.values(), key=lambda s: s.name)
    ]
    columns = {"name": "name", "tier": "tier", "plugin": "plugin", "tools": "tool_count"}
    print_listing(rows, {**columns, "description": "description"}, as_json)


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
