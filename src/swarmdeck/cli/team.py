"""`swarmdeck team ls|show|save|rm`: the team templates a swarm can run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.cli.app import app
from swarmdeck.cli.dispatch import HumanCommand

team_app = typer.Typer(
    help="List, show, save and remove swarm team templates.", no_args_is_help=True
)
app.add_typer(team_app, name="team")

WorkdirOpt = Annotated[
    Path, typer.Option("--workdir", "-C", help="The project whose .swarmdeck/teams/ is a tier.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON on stdout.")]


def _home() -> Path:
    from swarmdeck.config import load_settings

    return load_settings().home


@team_app.command("ls", cls=HumanCommand)
def ls(workdir: WorkdirOpt = Path("."), as_json: JsonOpt = False) -> None:
    """List the teams (packaged, the user's, the project's; the later wins on a name)."""
    from swarmdeck.swarm.team import list_teams

    teams = list_teams(_home(), workdir.resolve())
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "name": t.team.name,
                        "tier": t.tier,
                        "path": str(t.path),
                        "description": t.team.description,
                        "roles": [m.role for m in t.team.members],
                    }
                    for t in teams
                ]
            )
        )
        return
    table = Table(box=None, header_style="bold")
    for col in ("name", "tier", "roles", "description"):
        table.add_column(col)
    for t in teams:
        roles = ", ".join(f"{m.role} ({m.mode or 'any'})" for m in t.team.members)
        table.add_row(t.team.name, t.tier, roles, t.team.description)
    Console().print(table)


@team_app.command("show", cls=HumanCommand)
def show(
    name: Annotated[str, typer.Argument(help="A team name, or a team file.")],
    workdir: WorkdirOpt = Path("."),
    as_json: JsonOpt = False,
) -> None:
    """Show a team: every role with its model, mode, agent, tools and prompt; its limits and
    recovery policy; what in its file swarmdeck does not use."""
    from swarmdeck.swarm.team import load_team

    found = load_team(name, _home(), workdir.resolve())
    team = found.team
    if as_json:
        doc = {**team.model_dump(mode="json"), "tier": found.tier, "path": str(found.path)}
        print(json.dumps({**doc, "notes": team.notes()}, ensure_ascii=False))
        return
    console = Console(highlight=False)
    console.print(f"[bold]{team.name}[/] ({found.tier}, {found.path})", markup=True)
    if team.description:
        console.print(team.description, markup=False)
    r = team.recovery
    console.print(
        f"coordinator model {team.coordinator_model or '(from --model)'} · max_timeout "
        f"{team.max_timeout:g} s · member timeout "
        f"{f'{team.member_timeout:g} s' if team.member_timeout else 'none'}",
        markup=False,
    )
    reassign = f" (to {r.reassign_to})" if r.reassign_to else ""
    console.print(
        f"recovery: {r.max_retries} retries, {r.retry_delay:g} s apart, then "
        f"{r.on_all_failed}{reassign}",
        markup=False,
    )
    table = Table(box=None, header_style="bold")
    for col in ("role", "mode", "model", "agent", "tools", "prompt"):
        table.add_column(col)
    for m in team.members:
        prompt = " ".join(m.system_prompt.split())
        table.add_row(
            m.role,
            m.mode or "any",
            m.model or "(routed)",
            m.agent or "",
            ", ".join(m.tools) if m.tools is not None else "(the mode's)",
            prompt[:60] + ("…" if len(prompt) > 60 else ""),
        )
    console.print(table)
    for note in team.notes():
        console.print(f"note: {note}", markup=False)


ReplaceOpt = Annotated[bool, typer.Option("--force", help="Replace a saved team of that name.")]


@team_app.command("save", cls=HumanCommand)
def save(
    file: Annotated[Path, typer.Argument(help="A team file (YAML, or llmcode's JSON).")],
    force: ReplaceOpt = False,
) -> None:
    """Check a team file and save it among the user's teams, under its name."""
    from swarmdeck.swarm.team import save_team

    saved = save_team(file, _home(), force=force)
    print(json.dumps({"name": saved.team.name, "path": str(saved.path)}))
    for note in saved.team.notes():
        Console(stderr=True, highlight=False).print(f"note: {note}", markup=False)


@team_app.command("rm", cls=HumanCommand)
def rm(name: Annotated[str, typer.Argument(help="The name of a saved team.")]) -> None:
    """Remove one of the user's saved teams (a packaged team stays)."""
    from swarmdeck.swarm.team import remove_team

    removed = remove_team(name, _home())
    print(json.dumps({"removed": name, "path": str(removed)}))
