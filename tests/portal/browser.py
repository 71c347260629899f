"""Headless Chromium (Debian's), driven by Playwright, for the portal's browser tests; the
tests skip with the reason where either is missing, and must run in CI (`make test`
installs chromium)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# The flags a closed network needs: no background connections, no QUIC, no sync.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Screenshots of each page, for the docs (docs/portal/ keeps a chosen set).
SHOTS = Path(os.environ.get("SWARMDECK_PORTAL_SHOTS", "test-output/portal"))


def unavailable() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if CHROMIUM is None:
        return "chromium is not installed (apt-get install chromium; `make test` does)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture
def browser_page() -> Iterator[object]:
    """A fresh page in a fresh headless Chromium."""
    reason = unavailable()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the portal's browser tests must run in CI, but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(
            viewport={"width": 1280, "height": 860}, accept_downloads=True
        )
        page = context.new_page()
        page.set_default_timeout(30_000)
        try:
            yield page
        finally:
            context.close()
            browser.close()


def shot(page: object, name: str) -> Path:
    """Save a full-page screenshot under SHOTS."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path
