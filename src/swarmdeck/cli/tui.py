"""`swarmdeck tui`: the terminal UI (textual, the `tui` extra)."""

from __future__ import annotations

import importlib.util

from swarmdeck.cli.app import app
from swarmdeck.errors import UsageError


@app.command()
def tui() -> None:
    """Watch and steer every session of the store: the tree, live transcripts, artifacts;
    send, answer, cancel and resume. Every key is in the footer."""
    if importlib.util.find_spec("textual") is None:
        raise UsageError(
            "the terminal UI needs textual, which is not installed",
            "install it with `pip install 'swarmdeck[tui]'`",
        )
    from swarmdeck.cli.sessions import open_catalog, worker_registry
    from swarmdeck.ui.app import DeckApp

    catalog = open_catalog()
    DeckApp(catalog, worker_registry(catalog)).run()
