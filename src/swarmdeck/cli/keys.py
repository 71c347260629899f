"""`swarmdeck key`: store and remove provider keys (0600 files or the OS keyring)."""

from __future__ import annotations

import getpass
import json
import sys
from typing import Annotated

import typer

from swarmdeck.cli.app import app
from swarmdeck.config import load_settings
from swarmdeck.errors import UsageError

key_app = typer.Typer(help="Store and remove provider API keys.", no_args_is_help=True)
app.add_typer(key_app, name="key")


def _store():
    from swarmdeck.secrets.store import CredentialStore

    return CredentialStore(load_settings().credentials_dir)


def _known_provider(provider: str) -> None:
    from swarmdeck.models.registry import ProviderRegistry

    ProviderRegistry.load(load_settings().providers_dir).get(provider)


@key_app.command("set")
def set_key(
    provider: Annotated[str, typer.Argument(help="Provider key, e.g. openai.")],
    stdin: Annotated[
        bool, typer.Option("--stdin", help="Read the key from standard input.")
    ] = False,
    mcp: Annotated[
        bool,
        typer.Option(
            "--mcp",
            help="A key an MCP server's .mcp.json names as ${key:NAME} (not a provider's).",
        ),
    ] = False,
) -> None:
    """Store a provider's key: a hidden prompt, or stdin for scripts (never an argument)."""
    if not mcp:
        _known_provider(provider)
    if stdin or not sys.stdin.isatty():
        key = _key_from_stdin(provider)
    else:
        key = getpass.getpass(f"API key for {provider} (input hidden): ").strip()
    if not key:
        raise UsageError(
            "no key given", f'pipe it in: `printf %s "$KEY" | swarmdeck key set {provider}`'
        )
    _store().set(provider, key)
    print(json.dumps({"provider": provider, "stored": True}))


def _key_from_stdin(provider: str) -> str:
    """The one line piped in; more than one is refused (which of them is the key?)."""
    from swarmdeck.secrets.store import MAX_KEY_BYTES

    if sys.stdin.isatty():  # typed with --stdin: the line ends at Enter
        return sys.stdin.readline().strip()
    lines = [line.strip() for line in sys.stdin.read(MAX_KEY_BYTES + 1).splitlines()]
    lines = [line for line in lines if line]
    if len(lines) > 1:
        raise UsageError(
            f"stdin holds {len(lines)} lines and a key is one line; nothing was stored",
            f'pipe the key alone: `printf %s "$KEY" | swarmdeck key set {provider}`',
        )
    return lines[0] if lines else ""


@key_app.command("rm")
def rm(provider: Annotated[str, typer.Argument(help="Provider key.")]) -> None:
    """Remove a provider's stored key."""
    from swarmdeck.errors import NotFoundError

    if not _store().remove(provider):
        # Bad input, as a mistyped name usually is: said, and exit 2 (nothing was removed).
        raise NotFoundError(
            f"no stored key for {provider}; nothing was removed",
            "list the stored keys with `swarmdeck key ls`",
        )
    print(json.dumps({"provider": provider, "removed": True}))


@key_app.command("ls")
def ls() -> None:
    """List the providers that have a stored key (never the keys)."""
    print(json.dumps({"providers": _store().providers()}))
