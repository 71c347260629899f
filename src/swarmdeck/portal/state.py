"""What every request of one portal shares: the store, the access rules, the renderer, the
feed of changes and the actions on sessions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.portal.access import Access
from swarmdeck.portal.feed import StoreFeed
from swarmdeck.portal.index import SessionIndex
from swarmdeck.portal.render import Renderer
from swarmdeck.runtime.session_actions import SessionActions


@dataclass
class PortalState:
    """One portal's shared parts."""

    catalog: Catalog
    registry: WorkerRegistry
    access: Access
    renderer: Renderer
    feed: StoreFeed
    index: SessionIndex
    actions: SessionActions
    redact: Callable[[str], str]
    # True when the pages are served over TLS (the cookie is then marked Secure).
    secure: bool = False
