"""`swarmdeck system start|stop|status`: the system agents, once per store."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.cli.agents import PluginOpt, plugin_set
from swarmdeck.cli.app import app
from swarmdeck.config import load_settings
from swarmdeck.errors import MissingKeyError, UsageError

system_app = typer.Typer(
    help="Start, stop and inspect the system agents (sweeper, resource manager...).",
    no_args_is_help=True,
)
app.add_typer(system_app, name="system")


def _system_plugins(plugins: list[Path] | None) -> Any:
    found = plugin_set(None, plugins)
    agents = found.system_agents()
    if not agents:
        raise UsageError("no system agents are defined", "check `swarmdeck agents ls`")
    return found, agents


def _model(asked: str | None, stored: list[str]) -> str:
    """The model the user named: --model, else the setting, else the one stored before."""
    from swarmdeck.models.available import normalize
    from swarmdeck.models.registry import ProviderRegistry
    from swarmdeck.secrets.store import CredentialStore

    settings = load_settings()
    chosen = asked or settings.system_model or (stored[0] if len(set(stored)) == 1 else None)
    if chosen is None:
        raise UsageError(
            "system agents run on a model you name, never on a default",
            "pass --model PROVIDER:MODEL (see `swarmdeck provider ls`)",
        )
    registry = ProviderRegistry.load(settings.providers_dir)
    exact = normalize(registry, chosen)
    config = registry.get(exact.partition(":")[0])
    if config.needs_key and not CredentialStore(settings.credentials_dir).has(config.key):
        raise MissingKeyError(
            f"no key for provider {config.key}", f"run `swarmdeck key set {config.key}`"
        )
    return exact


@system_app.command("start")
def start(
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="provider:model the agents run on.")
    ] = None,
    plugin: PluginOpt = None,
) -> None:
    """Enable the system agents on this store; every `swarmdeck worker` keeps them running."""
    from swarmdeck.catalog.records import system_session_id
    from swarmdeck.catalog.system_agents import SystemAgents
    from swarmdeck.catalog.workers import WorkerRegistry
    from swarmdeck.cli.sessions import open_catalog
    from swarmdeck.config import load_settings

    _, agents = _system_plugins(plugin)
    catalog = open_catalog()
    table = SystemAgents(catalog.engine)
    stored = [r.model for r in table.rows()]
    chosen = _model(model, stored)
    folders = [str(p.resolve()) for p in plugin or []]
    table.enable([a.agent_id for a in agents], chosen, folders)
    console = Console(highlight=False)
    for a in agents:
        sid = system_session_id(a.agent_id)
        record = catalog.find_session(sid)
        note = ""
        if record is not None and record.model != chosen:
            note = (
                f"  (keeps {record.model}: to change it, `swarmdeck system stop`, "
                f"`swarmdeck sessions rm {sid}`, then start again)"
            )
        parent = f" under {system_session_id(a.parent)}" if a.parent else ""
        console.print(f"enabled {a.name} as {sid}{parent} on {chosen}{note}")
    settings = load_settings()
    fleet = WorkerRegistry(catalog.engine, settings.hostname, settings.lease_seconds)
    if not fleet.alive("worker"):  # only fleet workers keep the system agents
        console.print("no worker serves this store yet: run `swarmdeck worker` to start them")


@system_app.command("stop")
def stop() -> None:
    """Stop keeping the system agents running, and cancel their sessions."""
    from swarmdeck.catalog.records import system_session_id
    from swarmdeck.catalog.system_agents import SystemAgents
    from swarmdeck.runtime.host import Host

    host = Host()
    stopped = SystemAgents(host.catalog.engine).disable()

    async def go() -> list[str]:
        cancelled: list[str] = []
        try:
            for agent_id in stopped:
                sid = system_session_id(agent_id)
                record = host.catalog.find_session(sid)
                if record is not None and not record.terminal:
                    cancelled += await host.cancel(sid, "stopped by `swarmdeck system stop`")
        finally:
            await host.aclose()
        return cancelled

    cancelled = asyncio.run(go()) if stopped else []
    print(json.dumps({"disabled": stopped, "cancelled": cancelled}))


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else ""


@system_app.command("status")
def status(
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """The system agents: enabled or not, their model, session, status and quiet ticks."""
    from swarmdeck.catalog.records import system_session_id
    from swarmdeck.catalog.system_agents import SystemAgents
    from swarmdeck.cli.sessions import open_catalog

    catalog = open_catalog()
    rows = []
    for r in SystemAgents(catalog.engine).rows():
        sid = system_session_id(r.agent_id)
        record = catalog.find_session(sid)
        cron = (record.options.get("cron") or {}) if record else {}
        rows.append(
            {
                "agent": r.agent_id,
                "enabled": r.enabled,
                "model": r.model,
                "session_id": sid if record else None,
                "status": record.status if record else "not started",
                "turns": catalog.usage_totals([sid]).turns if record else 0,
                "quiet_ticks": cron.get("quiet_ticks", 0),
                "updated_at": record.updated_at if record else None,
            }
        )
    if as_json:
        print(json.dumps(rows))
        return
    if not rows:
        Console(stderr=True).print("no system agents enabled: `swarmdeck system start --model P:M`")
        return
    table = Table(box=None, header_style="bold")
    for col in (
        "agent",
        "enabled",
        "model",
        "session",
        "status",
        "turns",
        "quiet ticks",
        "last change",
    ):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["agent"],
            "yes" if r["enabled"] else "no",
            r["model"],
            r["session_id"] or "",
            r["status"],
            str(r["turns"]),
            str(r["quiet_ticks"]),
            _when(r["updated_at"] or 0),
        )
    Console().print(table)
