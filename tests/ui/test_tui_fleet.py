"""The TUI's fleet view (key `w`) through textual's pilot: hosts, the live workers on each
and the sessions each holds, read from the model `swarmdeck workers` uses; a dead worker
is not listed, and escape goes back to the sessions."""

from __future__ import annotations

import time
from pathlib import Path

from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.ui.app import DeckApp
from swarmdeck.ui.fleet_screen import FleetScreen
from swarmdeck.views.fleet_status import held_sessions
from tests.conftest import Store
from tests.ui.pilot_support import Tui, deck, screen_text, until
from tests.ui.seed import DEAD_WORKER, seed_fleet

# The seeded coordinator runs on this executor; a second host's worker holds nothing.
LIVE = {"host-b-7-live00": "host-b", "host-c-9-live01": "host-c"}


def host_node(tree: Tree[str], hostname: str) -> TreeNode[str]:
    """The tree's node for one host."""
    return next(n for n in tree.root.children if n.data == f"host:{hostname}")


def dialog_text(app: DeckApp) -> str:
    """What is inside the dialog's border, without the tree's guides (the sessions list
    behind it shows through where a short tree leaves room)."""
    rows = screen_text(app).splitlines()
    return "\n".join(ln.split("█")[1].strip(" │▼▶├└─") for ln in rows if "█" in ln[1:])


def register_live(catalog: Catalog) -> list[WorkerRegistry]:
    """Two live fleet workers on two other hosts (their leases renewed by the caller)."""
    registries = []
    for executor, hostname in LIVE.items():
        registry = WorkerRegistry(catalog.engine, hostname)
        registry.register(executor, role="worker")
        registries.append(registry)
    return registries


async def test_the_fleet_view_lists_hosts_workers_and_the_sessions_they_hold(
    store: Store, tmp_path: Path, tui: Tui
) -> None:
    catalog = Catalog.open(store.url)
    s = seed_fleet(catalog, tmp_path)
    registries = register_live(catalog)
    app = deck(catalog)
    async with tui(app) as pilot:
        await pilot.pause(0.1)
        # Their leases last 3 s, less than this test on a loaded machine: beat as workers do.
        beat = [lambda r=r, e=e: r.heartbeat(e) for r, e in zip(registries, LIVE, strict=True)]
        app.set_interval(0.5, lambda: [b() for b in beat])
        for b in beat:
            b()
        await pilot.press("w")
        await until(
            pilot,
            "the fleet view",
            lambda: isinstance(app.screen, FleetScreen) and app.screen.summary is not None,
        )
        text = screen_text(app)
        lines = dialog_text(app).splitlines()
        assert "2 hosts · queue" in text and "0 takeovers in the last hour" in text
        host_b = next(n for n, ln in enumerate(lines) if ln.startswith("host-b "))
        assert "1 worker · 1 session running" in lines[host_b]
        assert "host-b-7-live00  worker" in lines[host_b + 1]
        assert "1 running" in lines[host_b + 1]
        # The coordinator is the session its worker holds, one level further in.
        assert s.coordinator in lines[host_b + 2] and "release review" in lines[host_b + 2]
        host_c = next(n for n, ln in enumerate(lines) if ln.startswith("host-c "))
        assert "0 sessions running" in lines[host_c]
        assert "host-c-9-live01  worker" in lines[host_c + 1]
        # The worker whose lease lapsed long ago runs nothing: it is not in the view.
        assert DEAD_WORKER not in text and "host-a" not in text
        # A host folded stays folded when the view reads the fleet again.
        tree = app.screen.query_one("#fleet-tree", Tree)
        tree.cursor_line = 0
        await pilot.press("space")
        folded_at = time.monotonic()
        await until(pilot, "a refresh", lambda: time.monotonic() - folded_at > 1.5)
        assert not host_node(tree, "host-b").is_expanded
        assert s.coordinator not in dialog_text(app) and "host-b" in dialog_text(app)
        # A refresh that lands before the fold's message reached the screen keeps it too.
        screen = app.screen
        assert isinstance(screen, FleetScreen) and screen.summary is not None
        held = held_sessions(catalog, screen.summary)
        host_node(tree, "host-c").collapse()
        screen.show(screen.summary, held)
        assert not host_node(tree, "host-c").is_expanded
        await pilot.press("escape")
        await until(pilot, "the sessions", lambda: not isinstance(app.screen, FleetScreen))
