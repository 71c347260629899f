"""`swarmdeck status`: providers and keys (never values), the sandbox, the store, workers."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console

from swarmdeck import __version__
from swarmdeck.cli.app import app
from swarmdeck.config import load_settings


def _store_label(url: str) -> dict[str, str]:
    if url.startswith("sqlite"):
        return {"kind": "sqlite", "where": url.removeprefix("sqlite:///")}
    # Never print a password that may sit in the URL.
    host = url.split("@")[-1]
    return {"kind": "postgresql", "where": host}


def collect_status() -> dict[str, Any]:
    """Everything `status` reports, as plain data."""
    from swarmdeck.cli.sessions import open_catalog
    from swarmdeck.cli.workers import fleet_status
    from swarmdeck.models.registry import ProviderRegistry
    from swarmdeck.secrets.store import CredentialStore
    from swarmdeck.tools.sandbox import detect_sandbox

    settings = load_settings()
    store = CredentialStore(settings.credentials_dir)
    providers = [
        {
            "key": p.key,
            "kind": p.kind,
            "model": f"{p.key}:{p.model}",
            "needs_key": p.needs_key,
            "has_key": store.has(p.key) if p.needs_key else None,
            "ready": (not p.needs_key) or store.has(p.key),
        }
        for p in ProviderRegistry.load(settings.providers_dir).all()
    ]
    sandbox = detect_sandbox()
    catalog = open_catalog()
    fleet = fleet_status()
    counts: dict[str, int] = {}
    for s in catalog.list_sessions(limit=100_000):
        counts[s.status] = counts.get(s.status, 0) + 1
    return {
        "version": __version__,
        "home": str(settings.home),
        "store": _store_label(settings.store_url),
        "providers": providers,
        "sandbox": {
            "active": sandbox.available,
            "reason": sandbox.reason,
            "version": sandbox.version,
        },
        "workers": fleet["workers"],
        "fleet": fleet,
        "sessions": counts,
    }


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """Providers and whether each has a key, the sandbox, the store, the workers alive."""
    doc = collect_status()
    if as_json:
        print(json.dumps(doc))
        return
    console = Console()
    console.print(f"[bold]swarmdeck {doc['version']}[/]  home {doc['home']}")
    console.print(f"store   {doc['store']['kind']} ({doc['store']['where']})")
    sb = doc["sandbox"]
    state = (
        f"[green]active[/] (bubblewrap {sb['version'] or ''})"
        if sb["active"]
        else f"[yellow]inactive[/]: {sb['reason']}; the tool policy still holds"
    )
    console.print(f"sandbox {state}")
    ready = [p["key"] for p in doc["providers"] if p["ready"]]
    missing = [p["key"] for p in doc["providers"] if not p["ready"]]
    console.print(f"providers ready: {', '.join(ready) or 'none'}")
    if missing:
        console.print(f"providers without a key: {', '.join(missing)}  (swarmdeck key set NAME)")
    console.print(f"workers alive: {len(doc['workers'])}")
    from swarmdeck.cli.workers import print_fleet

    print_fleet(console, doc["fleet"])
    if doc["sessions"]:
        console.print(
            "sessions: " + ", ".join(f"{k} {v}" for k, v in sorted(doc["sessions"].items()))
        )
