"""`swarmdeck status`: providers and keys (never values), the sandbox, the store, workers."""

from __future__ import annotations

import asyncio
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


async def _probe_all(base_urls: list[str]) -> dict[str, str | None]:
    """Probe endpoints at once: why each does not answer (None when it does)."""
    from swarmdeck.models.reach import probe

    unique = sorted(set(base_urls))
    found = await asyncio.gather(*(probe(url) for url in unique))
    return dict(zip(unique, found, strict=True))


def collect_status() -> dict[str, Any]:
    """Everything `status` reports, as plain data."""
    from swarmdeck.cli.sessions import open_catalog
    from swarmdeck.cli.workers import fleet_status
    from swarmdeck.models.registry import ProviderRegistry
    from swarmdeck.secrets.store import CredentialStore
    from swarmdeck.tools.sandbox import sandbox_in_force

    settings = load_settings()
    store = CredentialStore(settings.credentials_dir)
    configs = ProviderRegistry.load(settings.providers_dir).all()
    # A keyless provider (Ollama, vLLM) is a server of the user's: ready only if it answers.
    # A scripted one (the demo's) is served by the process that calls it: always ready.
    probed = [p for p in configs if not p.needs_key and p.script is None]
    silence = asyncio.run(_probe_all([p.base_url for p in probed]))
    providers = []
    for p in configs:
        entry: dict[str, Any] = {
            "key": p.key,
            "kind": p.kind,
            "model": f"{p.key}:{p.model}",
            "needs_key": p.needs_key,
            "has_key": store.has(p.key) if p.needs_key else None,
            "ready": store.has(p.key),
        }
        if p.script is not None:
            entry.update(ready=True, scripted=True)
        elif not p.needs_key:
            why = silence[p.base_url]
            entry.update(ready=why is None, answering=why is None, not_answering=why)
        providers.append(entry)
    sandbox = sandbox_in_force(settings.no_sandbox)
    from swarmdeck.runners import install
    from swarmdeck.runners.pins import PINS

    runners = {}
    for name in sorted(PINS):
        state = install.status(settings.home, name)
        where = str(state.binary) if state.binary else None
        runners[name] = {"installed": state.installed, "pinned": state.pinned, "binary": where}
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
            "kind": sandbox.kind,
            "active": sandbox.available,
            "reason": sandbox.reason,
            "version": sandbox.version,
            "opted_out": settings.no_sandbox,
        },
        "runners": runners,
        "workers": fleet["workers"],
        "fleet": fleet,
        "sessions": counts,
    }


def _sandbox_line(sb: dict[str, Any]) -> tuple[str, str | None]:
    """What confines shell tools here, what that means for the modes, and the hint (how to
    get a sandbox) when there is none."""
    from swarmdeck.tools.sandbox import INSTALL_HINT, OPT_OUT_KEEPS, OPT_OUT_LIFTS

    if sb["kind"] == "bwrap":
        return f"bwrap (bubblewrap {sb['version'] or ''})", None
    if sb["kind"] == "landlock":
        return f"landlock (ABI {sb['version']}; bubblewrap confines more)", None
    effect = (
        f"read-only modes have no shell; you opted out: {OPT_OUT_LIFTS}; {OPT_OUT_KEEPS}"
        if sb["opted_out"]
        else "read-only modes have no shell; write modes refuse it unless --no-sandbox"
    )
    return f"none: {sb['reason']}; {effect}", INSTALL_HINT


def _print_hinted(console: Console, text: str, hint: str | None) -> None:
    """A line with its hint, never broken mid-phrase at the terminal's width."""
    from swarmdeck.views.text import hinted

    lines = hinted(text, hint, console.width) if hint else [text]
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


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
    # A path is never broken in two: the terminal wraps a long one whole.
    console.print(f"[bold]swarmdeck {doc['version']}[/]  home {doc['home']}", soft_wrap=True)
    console.print(f"store   {doc['store']['kind']} ({doc['store']['where']})", soft_wrap=True)
    sandbox, install = _sandbox_line(doc["sandbox"])
    _print_hinted(console, f"sandbox {sandbox}", install)
    ready = [p["key"] for p in doc["providers"] if p["ready"]]
    missing = [p["key"] for p in doc["providers"] if p["needs_key"] and not p["ready"]]
    silent = [p for p in doc["providers"] if not p["needs_key"] and not p["ready"]]
    console.print(f"providers ready: {', '.join(ready) or 'none'}")
    if missing:
        _print_hinted(
            console, f"providers without a key: {', '.join(missing)}", "swarmdeck key set NAME"
        )
    for p in silent:
        _print_hinted(
            console,
            f"provider {p['key']} not answering: {p['not_answering']}",
            f"start its server, or fix base_url: swarmdeck provider show {p['key']}",
        )
    installed = [f"{n} {r['installed']}" for n, r in doc["runners"].items() if r["installed"]]
    _print_hinted(
        console,
        f"runners installed: {', '.join(installed) or 'none'}",
        None if installed else "swarmdeck runner install opencode|claude|codex",
    )
    console.print(f"workers alive: {len(doc['workers'])}")
    from swarmdeck.cli.workers import print_fleet

    print_fleet(console, doc["fleet"])
    if doc["sessions"]:
        console.print(
            "sessions: " + ", ".join(f"{k} {v}" for k, v in sorted(doc["sessions"].items()))
        )
