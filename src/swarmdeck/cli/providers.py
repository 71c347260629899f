"""`swarmdeck provider`: list, inspect, add and remove providers."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.cli.app import app
from swarmdeck.cli.dispatch import HumanCommand
from swarmdeck.config import load_settings
from swarmdeck.errors import ConfigError

provider_app = typer.Typer(
    help="List, inspect, add and remove LLM providers.", no_args_is_help=True
)
app.add_typer(provider_app, name="provider")

DEFAULT_CONCURRENCY = 4


def _registry():
    from swarmdeck.models.registry import ProviderRegistry

    return ProviderRegistry.load(load_settings().providers_dir)


def _has_key(key: str) -> bool:
    from swarmdeck.secrets.store import CredentialStore

    return CredentialStore(load_settings().credentials_dir).has(key)


@provider_app.command("ls")
def ls(as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False) -> None:
    """List providers, whether each has a key, and where each is defined."""
    registry = _registry()
    rows = [
        {
            "key": p.key,
            "kind": p.kind,
            "model": p.model,
            "base_url": p.base_url,
            "needs_key": p.needs_key,
            "has_key": _has_key(p.key) if p.needs_key else None,
            "source": registry.source(p.key),
        }
        for p in registry.all()
    ]
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(box=None, header_style="bold")
    for col in ("provider", "kind", "default model", "endpoint", "key", "defined in"):
        table.add_column(col)
    for r in rows:
        key = (
            "not needed"
            if not r["needs_key"]
            else ("[green]set[/]" if r["has_key"] else "[red]missing[/]")
        )
        table.add_row(r["key"], r["kind"], r["model"], r["base_url"], key, r["source"])
    Console().print(table)


@provider_app.command("show")
def show(key: Annotated[str, typer.Argument(help="Provider key, e.g. deepseek.")]) -> None:
    """Print one provider's full configuration as JSON (never its key)."""
    registry = _registry()
    config = registry.get(key)
    doc = config.model_dump(mode="json")
    doc["source"] = registry.source(key)
    doc["has_key"] = _has_key(key) if config.needs_key else None
    print(json.dumps(doc, indent=2))


@provider_app.command("add", cls=HumanCommand)
def add(
    key: Annotated[str, typer.Argument(help="Provider key (lowercase).")],
    base_url: Annotated[str, typer.Option(help="API endpoint, e.g. http://127.0.0.1:8000/v1")],
    model: Annotated[str, typer.Option(help="Default model name.")],
    kind: Annotated[
        str,
        typer.Option(
            help="openai (Chat Completions, compatible servers), anthropic (Messages) "
            "or openai-responses (OpenAI's Responses API)."
        ),
    ] = "openai",
    needs_key: Annotated[bool, typer.Option(help="Whether requests need an API key.")] = True,
    concurrency: Annotated[
        int,
        typer.Option(
            min=1,
            help="Requests in flight at once, all workers. A single-slot local server "
            "(llama.cpp's default) cuts extra streams off: give it --concurrency 1.",
        ),
    ] = DEFAULT_CONCURRENCY,
    rpm: Annotated[
        int | None, typer.Option(min=1, help="Requests per minute, all workers.")
    ] = None,
    context_tokens: Annotated[
        int | None, typer.Option(min=1, help="The model's context window, in tokens.")
    ] = None,
    output_tokens: Annotated[
        int | None, typer.Option(min=1, help="Most tokens one answer may have.")
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(min=0, help="Seconds to wait for a call to answer (timeout_s; default 600)."),
    ] = None,
    compact_at: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            max=1.0,
            help="Share of the window (less the output) a prompt may fill before the "
            "older turns are summarized (default 0.75).",
        ),
    ] = None,
) -> None:
    """Add (or replace) a user provider file under the home dir.

    A local server that serves one request at a time, such as llama.cpp, needs
    `--concurrency 1`: with the default of 4, the streams it cannot serve are cut off.
    """
    from pydantic import ValidationError

    from swarmdeck.models.registry import ProviderConfig

    optional = {"context_tokens": context_tokens, "output_tokens": output_tokens}
    optional["timeout_s"] = timeout
    optional["compact_at"] = compact_at
    try:
        config = ProviderConfig(
            key=key,
            kind=kind,
            base_url=base_url,
            model=model,
            display_name=key,
            needs_key=needs_key,
            concurrency=concurrency,
            rpm=rpm,
            **{name: value for name, value in optional.items() if value is not None},
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(map(str, first["loc"]))
        flag = {"timeout_s": "timeout"}.get(field, field).replace("_", "-")
        raise ConfigError(f"invalid provider: --{flag}: {first['msg']}") from exc
    path = _registry().add(config, load_settings().providers_dir)
    print(json.dumps({"added": key, "file": str(path)}))


@provider_app.command("rm")
def rm(key: Annotated[str, typer.Argument(help="Provider key.")]) -> None:
    """Remove a user provider file (packaged providers cannot be removed)."""
    _registry().remove(key, load_settings().providers_dir)
    print(json.dumps({"removed": key}))
