"""Building and serving a portal: its state from the store the settings name, a socket
bound before the URL is printed (so port 0 prints the port it got), and uvicorn without
its access log (the sign-in URL carries a token)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.overview import Overview
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.portal.access import Access
from swarmdeck.portal.feed import StoreFeed
from swarmdeck.portal.index import SessionIndex
from swarmdeck.portal.render import Renderer
from swarmdeck.portal.state import PortalState
from swarmdeck.portal.tokens import TokenStore
from swarmdeck.runtime.session_actions import SessionActions
from swarmdeck.views.fleet import FleetView


def tokens_path(home: Path) -> Path:
    """Where a home keeps its portal tokens (hashed)."""
    return home / "portal" / "tokens.json"


@dataclass
class Listener:
    """Where the portal listens."""

    host: str
    port: int
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @property
    def loopback(self) -> bool:
        """True when only this machine can connect."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def tls(self) -> bool:
        """True when the portal speaks HTTPS itself."""
        return self.tls_cert is not None


def build_state(
    catalog: Catalog,
    registry: WorkerRegistry,
    tokens: TokenStore,
    redact: Callable[[str], str],
    secure: bool,
) -> PortalState:
    """A portal's shared parts over one store."""
    return PortalState(
        catalog=catalog,
        registry=registry,
        access=Access(tokens),
        renderer=Renderer(redact),
        feed=StoreFeed(Overview(catalog)),
        index=SessionIndex(FleetView(catalog, registry)),
        actions=SessionActions(),
        redact=redact,
        secure=secure,
    )


def bind(listener: Listener) -> socket.socket:
    """The listening socket (port 0: the kernel picks one)."""
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((listener.host, listener.port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(state: PortalState, listener: Listener, sock: socket.socket) -> None:
    """Serve until interrupted."""
    import uvicorn

    from swarmdeck.portal.app import create_app

    config = uvicorn.Config(
        create_app(state),
        log_level="warning",
        access_log=False,
        ssl_certfile=str(listener.tls_cert) if listener.tls_cert else None,
        ssl_keyfile=str(listener.tls_key) if listener.tls_key else None,
        lifespan="on",
        # Open live streams never end by themselves: on Ctrl-C or SIGTERM they are cut
        # after a second instead of holding the shutdown forever.
        timeout_graceful_shutdown=1,
    )
    uvicorn.Server(config).run(sockets=[sock])
