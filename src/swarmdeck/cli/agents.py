"""`swarmdeck agents`: the named agents of every plugin tier; validate plugin folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.cli.app import app
from swarmdeck.config import load_settings
from swarmdeck.errors import NotFoundError

if TYPE_CHECKING:
    from swarmdeck.plugins.definitions import Problem
    from swarmdeck.plugins.tiers import PluginSet

agents_app = typer.Typer(help="List, show and validate named agents.", no_args_is_help=True)
app.add_typer(agents_app, name="agents")

PluginOpt = Annotated[
    list[Path] | None,
    typer.Option("--plugin", help="A plugin folder (or a folder of plugins); repeatable."),
]
WorkdirOpt = Annotated[
    Path, typer.Option("--workdir", help="The project whose .swarmdeck/ is a tier.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout.")]


def plugin_set(workdir: Path | None, plugins: list[Path] | None) -> PluginSet:
    """Every tier a session in `workdir` with these folders would see."""
    from swarmdeck.plugins.tiers import load_plugin_set

    return load_plugin_set(
        load_settings().home,
        workdir.resolve() if workdir else None,
        [p.resolve() for p in plugins or []],
    )


def known_tools() -> list[str]:
    """The names of swarmdeck's built-in tools."""
    from swarmdeck.tools.builtins.registry import builtin_tools

    return [t.name for t in builtin_tools()]


def model_check(name: str) -> str | None:
    """None when a provider serves the model, else why not."""
    from swarmdeck.models.registry import ProviderRegistry

    try:
        ProviderRegistry.load(load_settings().providers_dir).resolve(name)
    except Exception as exc:
        return str(exc)
    return None


def print_listing(rows: list[dict[str, Any]], columns: dict[str, str], as_json: bool) -> None:
    """Rows as one JSON array, or as a table of these columns (heading -> key)."""
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(box=None, header_style="bold")
    for heading in columns:
        table.add_column(heading)
    for row in rows:
        table.add_row(*(str(row[key] if row[key] is not None else "") for key in columns.values()))
    Console().print(table)


@agents_app.command("ls")
def ls(workdir: WorkdirOpt = Path("."), plugin: PluginOpt = None, as_json: JsonOpt = False) -> None:
    """List the named agents (the winner of each name across the tiers)."""
    found = plugin_set(workdir, plugin)
    rows = [
        {
            "name": a.name,
            "kind": f"system ({a.agent_id})" if a.system else "agent",
            "description": a.description,
            "system": a.system,
            "id": a.agent_id if a.system else None,
            "tier": a.tier,
            "plugin": a.plugin,
            "path": str(a.path),
        }
        for a in sorted(found.agents.values(), key=lambda a: a.name)
    ]
    columns = {"name": "name", "kind": "kind", "tier": "tier", "plugin": "plugin"}
    print_listing(rows, {**columns, "description": "description"}, as_json)


@agents_app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="The agent's name.")],
    workdir: WorkdirOpt = Path("."),
    plugin: PluginOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show an agent: every front-matter field (unknown ones too), its tools and prompt."""
    from swarmdeck.runtime.agents import agent_tools

    found = plugin_set(workdir, plugin)
    agent = found.agent(name)
    if agent is None:
        raise NotFoundError(f"no agent named {name}", "list them with `swarmdeck agents ls`")
    fields = {
        "name": agent.name,
        "description": agent.description,
        "title": agent.title,
        "system": agent.system,
        "id": agent.id,
        "parent": agent.parent,
        "tools": agent.tools,
        "skills": agent.skills,
        "initialPrompt": agent.initial_prompt,
        "model": agent.model,
        "cron": agent.cron.model_dump() if agent.cron else None,
        "splash": agent.splash,
        "mcpServers": agent.mcp_servers,
    }
    overridden = [o for o in found.overrides if o.kind == "agent" and o.name == name]
    doc = {
        **fields,
        "unknown_fields": agent.extra,
        "offered_tools": agent_tools(agent),
        "path": str(agent.path),
        "tier": agent.tier,
        "overrides": [str(o.loser) for o in overridden],
        "prompt": agent.body,
    }
    if as_json:
        print(json.dumps(doc, ensure_ascii=False))
        return
    console = Console(highlight=False)
    console.print(f"[bold]{agent.name}[/]  {agent.path}  ({agent.tier} tier)")
    for o in overridden:
        console.print(f"  overrides {o.loser}")
    for key, value in fields.items():
        if value not in (None, [], "") and key not in ("name", "splash"):
            console.print(f"  {key}: {value}")
    for key, value in agent.extra.items():
        console.print(f"  {key}: {value}  [yellow](unknown field, kept)[/]")
    offered = doc["offered_tools"]
    console.print(f"  offered tools: {', '.join(offered) if offered else 'every default tool'}")
    console.print()
    console.print(agent.body, markup=False)


def print_report(problems: list[Problem], files: int) -> int:
    """Print problems grouped by file; returns the number of errors."""
    console = Console(highlight=False, soft_wrap=True)
    errors = [p for p in problems if p.level == "error"]
    for p in problems:
        tag = "[red]error[/]" if p.level == "error" else "[yellow]warning[/]"
        console.print(f"{tag} ", end="")
        console.print(p.line(), markup=False)
    warnings = len(problems) - len(errors)
    verdict = "[green]clean[/]" if not errors else f"[red]{len(errors)} error(s)[/]"
    console.print(f"{files} file(s) checked: {verdict}, {warnings} warning(s)")
    return len(errors)


def checked_files(found: PluginSet, only: list[Path] | None) -> int:
    """How many definition files were read (under `only` when given)."""
    paths = [a.path for p in found.plugins for a in p.agents]
    paths += [s.path for p in found.plugins for s in p.skills]
    if only:
        roots = [o.resolve() for o in only]
        paths = [p for p in paths if any(p.resolve().is_relative_to(r) for r in roots)]
    return len(paths)


@agents_app.command("validate")
def validate(
    folders: Annotated[
        list[Path] | None,
        typer.Argument(help="Plugin folders (or folders of plugins); default: every tier."),
    ] = None,
    workdir: WorkdirOpt = Path("."),
) -> None:
    """Name every problem of every plugin file, by file and field; exit 2 if any is an error."""
    from swarmdeck.plugins.validate import report

    for folder in folders or []:
        if not folder.exists():
            raise NotFoundError(f"no folder {folder}", "pass a plugin folder")
    from swarmdeck.integrations.mcp.config import mcp_problems

    found = plugin_set(workdir, folders)
    problems = report(found, known_tools(), model_check, only_under=folders or None)
    mcp = mcp_problems(found.plugins, None if folders else workdir.resolve())
    if folders:
        roots = [f.resolve() for f in folders]
        mcp = [p for p in mcp if any(p.path.resolve().is_relative_to(r) for r in roots)]
    problems = sorted(
        [*problems, *mcp], key=lambda p: (str(p.path), p.level != "error", p.field or "")
    )
    if print_report(problems, checked_files(found, folders)):
        raise typer.Exit(2)
