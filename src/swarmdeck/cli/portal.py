"""`swarmdeck portal`: the web portal over this store, and its access tokens."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.cli.app import app
from swarmdeck.config import load_settings
from swarmdeck.errors import UsageError

if TYPE_CHECKING:
    from swarmdeck.portal.tokens import TokenStore

portal_app = typer.Typer(
    help="Watch and steer the fleet from a browser; manage who may.",
    invoke_without_command=True,
)
app.add_typer(portal_app, name="portal")
token_app = typer.Typer(
    help="Portal access tokens: each is a viewer's (read only) or an operator's.",
    no_args_is_help=True,
)
portal_app.add_typer(token_app, name="token")


def _need_extra() -> None:
    missing = [m for m in ("starlette", "uvicorn", "jinja2") if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(
            f"the portal needs {', '.join(missing)}, which is not installed",
            "install it with `pip install 'swarmdeck[portal]'`",
        )


def _token_store() -> TokenStore:
    from swarmdeck.portal.serve import tokens_path
    from swarmdeck.portal.tokens import TokenStore

    return TokenStore(tokens_path(load_settings().home))


@portal_app.callback()
def portal(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option(help="The address to listen on; loopback unless you say otherwise.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="The port (0 picks a free one).")] = 8787,
    tls_cert: Annotated[
        Path | None, typer.Option(help="Serve HTTPS with this certificate (PEM).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The certificate's key (PEM).")] = None,
    behind_proxy: Annotated[
        bool,
        typer.Option(
            "--behind-proxy",
            help="A reverse proxy terminates TLS in front of the portal (see docs/portal.md).",
        ),
    ] = False,
) -> None:
    """Serve the web portal for this store (SQLite or PostgreSQL): the fleet, the session
    tree, live transcripts; send, answer, cancel and resume. It prints its URL with a
    one-time sign-in token; `swarmdeck portal token add` makes lasting ones."""
    if ctx.invoked_subcommand is not None:
        return
    _need_extra()
    if (tls_cert is None) != (tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together", "give both, or neither")
    from swarmdeck.cli.sessions import open_catalog, worker_registry
    from swarmdeck.portal.serve import Listener, bind, build_state, serve
    from swarmdeck.secrets.redact import load_redactor
    from swarmdeck.secrets.store import CredentialStore

    listener = Listener(host, port, tls_cert, tls_key)
    catalog = open_catalog()
    redact = load_redactor(CredentialStore(load_settings().credentials_dir)).redact
    state = build_state(catalog, worker_registry(catalog), _token_store(), redact, listener.tls)
    try:
        sock = bind(listener)
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror}", "pick another --port"
        ) from None
    bound = sock.getsockname()[1]
    scheme = "https" if listener.tls else "http"
    shown = f"[{host}]" if ":" in host else host
    err = Console(stderr=True, soft_wrap=True)
    if not listener.loopback and not listener.tls and not behind_proxy:
        err.print(
            f"warning: the portal listens on {host} without TLS: tokens and cookies cross "
            "the network in clear. Give --tls-cert/--tls-key, or put a reverse proxy with "
            "TLS in front and pass --behind-proxy (docs/portal.md)."
        )
    print(f"portal: {scheme}://{shown}:{bound}/login?token={state.access.one_time_token}")
    err.print("the link signs one browser in, once, as an operator; Ctrl-C stops the portal")
    sys.stdout.flush()
    serve(state, listener, sock)


@token_app.command("add")
def token_add(
    name: Annotated[str, typer.Argument(help="A name for the token (e.g. alice-phone).")],
    role: Annotated[
        str, typer.Option(help="viewer (read only) or operator (may act on sessions).")
    ] = "viewer",
) -> None:
    """Make a token and print it, once: only its hash is kept."""
    secret = _token_store().add(name, role)
    print(secret)
    Console(stderr=True, soft_wrap=True).print(
        f"token {name!r} ({role}) made: this is the only time it is shown. Sign in at the "
        "portal's /login with it."
    )


@token_app.command("ls")
def token_ls() -> None:
    """The tokens that may sign in, with their roles (never the tokens themselves)."""
    import datetime as dt

    tokens = _token_store().list()
    if not tokens:
        print("no portal token; make one with `swarmdeck portal token add NAME --role viewer`")
        return
    table = Table(box=None, header_style="bold")
    for col in ("name", "role", "made"):
        table.add_column(col)
    for t in tokens:
        made = dt.datetime.fromtimestamp(t.created_at).strftime("%Y-%m-%d %H:%M")
        table.add_row(t.name, t.role, made)
    Console().print(table)


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str, typer.Argument(help="The token's name.")],
) -> None:
    """Remove a token: browsers signed in with it lose access at their next request."""
    _token_store().revoke(name)
    print(f"revoked {name}")
