"""Driving the TUI in tests: the app on a store, waiting on what it shows, its lines as
text, and SVG snapshots kept beside the tests."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Literal

from textual.pilot import Pilot

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.ui.app import DeckApp
from tests.ui.seed import NOW

SNAPSHOTS = Path(__file__).parent / "snapshots"
# Set to 1 to write the snapshots anew (then look at them, and commit them).
UPDATE_ENV = "SWARMDECK_UPDATE_SNAPSHOTS"
SIZE = (140, 36)


def deck(catalog: Catalog, *, pinned: bool = True, **kwargs: object) -> DeckApp:
    """The app on this catalog; its clock pinned to the seed's unless asked otherwise."""
    clock = (lambda: NOW) if pinned else time.time
    return DeckApp(catalog, WorkerRegistry(catalog.engine), clock=clock, **kwargs)  # type: ignore[arg-type]


async def until(pilot: Pilot, what: str, check: Callable[[], bool], timeout: float = 10) -> None:
    """Let the app run until `check` holds (fails after `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


async def loaded(pilot: Pilot) -> None:
    """Wait for the first fleet and the selected session's detail on screen."""
    app = pilot.app
    assert isinstance(app, DeckApp)
    await until(pilot, "the fleet", lambda: app.fleet is not None)
    await until(
        pilot,
        "the selected session",
        lambda: app.followed is not None and app.followed.detail is not None,
    )
    await pilot.pause(0.1)


# How long a 10,000-session fleet may take to show on a loaded machine.
FLEET_TIMEOUT_S = 60


@asynccontextmanager
async def piloted(
    app: DeckApp, *, wait: Literal["detail", "fleet"] = "detail"
) -> AsyncIterator[Pilot]:
    """`app` under textual's pilot at SIZE, once it shows the first fleet and the selected
    session's detail (`detail`), or only the fleet (`fleet`, for the big ones)."""
    async with app.run_test(size=SIZE) as pilot:
        if wait == "detail":
            await loaded(pilot)
        else:
            await until(
                pilot, "the fleet on screen", lambda: app.loaded_at is not None, FLEET_TIMEOUT_S
            )
        yield pilot


# The `tui` fixture: `async with tui(app) as pilot:`.
Tui = Callable[..., AbstractAsyncContextManager[Pilot]]


def list_lines(app: DeckApp) -> list[str]:
    """The session list's lines as plain text (every line, not only the visible)."""
    width = app.session_list.size.width
    return [app.session_list.line_text(ln, width).plain.rstrip() for ln in app.session_list.lines]


def notices(app: DeckApp) -> list[str]:
    """The messages the app notified, oldest first."""
    return [str(n.message) for n in app._notifications]


def screen_text(app: DeckApp) -> str:
    """What the whole screen shows, as text."""
    return "\n".join(
        "".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()
    )


async def settled(pilot: Pilot, timeout: float = 5) -> str:
    """The screen as SVG once it stops changing (layout and scrollbars land a moment after
    the content, later on a loaded machine)."""
    app = pilot.app
    deadline = time.monotonic() + timeout
    svg = app.export_screenshot(title="swarmdeck")
    while time.monotonic() < deadline:
        await pilot.pause(0.2)
        again = app.export_screenshot(title="swarmdeck")
        if again == svg:
            return svg
        svg = again
    return svg


async def assert_snapshot(pilot: Pilot, name: str) -> None:
    """The screen as SVG equals the committed snapshot `name`.svg."""
    svg = await settled(pilot)
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get(UPDATE_ENV) == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(svg)
        return
    assert path.exists(), f"no snapshot {path.name}: run with {UPDATE_ENV}=1 and commit it"
    if svg != path.read_text():
        path.with_suffix(".new.svg").write_text(svg)
        raise AssertionError(
            f"the screen differs from {path.name} (what it shows now: {path.stem}.new.svg)"
        )
