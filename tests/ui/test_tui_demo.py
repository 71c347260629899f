"""What a newcomer does after `make demo`, with no manual: `swarmdeck tui` shows the demo's
tree; they open the coordinator's transcript, read its artifact, and answer the session
that waits for them, reading the keys off the footer; the answered session finishes
although the demo's process has ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.cli.sessions import open_catalog
from swarmdeck.ui.dialogs import ArtifactDialog, PromptDialog
from tests.conftest import run_cli
from tests.ui.pilot_support import Tui, deck, list_lines, screen_text, until
from tests.ui.test_tui_live import inbox


@pytest.mark.timeout(300)  # its own waits allow more than the suite's 120 s
async def test_after_the_demo_the_tui_shows_its_tree_and_answers_its_question(
    sd_home: Path, tui: Tui
) -> None:
    assert run_cli(sd_home, "demo", timeout=180).code == 0
    catalog = open_catalog()
    app = deck(catalog, pinned=False)
    async with tui(app) as pilot:
        footer = screen_text(app).splitlines()[-1]
        for key in ("move", "fold", "search", "needs me", "answer", "open", "copy", "pane", "quit"):
            assert key in footer, key
        lines = list_lines(app)
        demo = next(
            ln for ln in app.session_list.lines if ln.row and ln.row.title == "swarmdeck demo"
        )
        assert demo.children == 3 and any("swarmdeck demo (+3)" in ln for ln in lines)
        # The coordinator: unfold it, read its transcript.
        app.session_list.select(demo.row.id)
        await pilot.press("enter")
        await until(
            pilot,
            "the coordinator's transcript",
            lambda: (
                app.followed is not None
                and app.followed.session_id == demo.row.id
                and app.followed.detail is not None
            ),
        )
        text = screen_text(app)
        assert "spawn_agent(" in text and "write_artifact(" in text
        assert sum("✓ completed" in ln for ln in list_lines(app)) == 4
        # Its artifact.
        await pilot.press("o")
        assert isinstance(app.screen, ArtifactDialog)
        await until(pilot, "the artifact", lambda: "# Review of calc" in screen_text(app))
        await pilot.press("escape")
        # The session that waits for an answer.
        await pilot.press("n")
        [waiting] = [ln.row for ln in app.session_list.lines if ln.row]
        assert waiting.title == "a question for you"
        await until(
            pilot,
            "its question",
            lambda: (
                app.followed is not None
                and app.followed.detail is not None
                and app.followed.detail.row.question
                == "Which branch should the release notes cover?"
                and "asks you: Which branch" in screen_text(app)
            ),
        )
        await pilot.press("a")
        assert isinstance(app.screen, PromptDialog)
        await pilot.press(*"main", "enter")
        await until(pilot, "the answer stored", lambda: inbox(catalog, waiting.id) != [], 20)
        [(kind, payload)] = inbox(catalog, waiting.id)
        assert kind == "answer" and '"main"' in payload
        # The demo's process is gone: the TUI resumes the session in a process of its own,
        # which serves the demo's script itself, and the session finishes with the answer.
        await until(
            pilot,
            "the answered session to finish",
            lambda: catalog.get_session(waiting.id).terminal,
            120,
        )
        done = catalog.get_session(waiting.id)
        assert done.status == "completed", done.error
        assert done.final_text == "Noted: the user answered: main. Drafting the notes from it."
        # It leaves the needs-me view; every session again, and it shows as completed.
        await until(
            pilot,
            "the needs-me view to empty",
            lambda: not any(ln.row for ln in app.session_list.lines),
        )
        await pilot.press("n")
        await until(
            pilot,
            "the tree to show it",
            lambda: any(
                ln.row and ln.row.id == waiting.id and ln.row.status == "completed"
                for ln in app.session_list.lines
            ),
        )
