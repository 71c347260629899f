"""The TUI shows a warned budget in the session list, and each compaction with its summary
(folded under it) and the guard's note, in the transcript pane."""

from __future__ import annotations

from pathlib import Path

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.ui.transcript_pane import TranscriptPane
from tests.conftest import Store
from tests.ui.pilot_support import Tui, deck, list_lines, until

SID = "18f00000009ff0009"
SUMMARY = "[Summary of the 4 earlier messages]\nThe agent read app.py: main returns 42."


def _seed(catalog: Catalog, tmp: Path) -> None:
    catalog.create_session(
        session_id=SID,
        model="fake:scripted",
        mode="agent",
        workdir=str(tmp),
        run_dir=str(tmp / "runs" / SID),
        task="Read app.py again and again",
        options={"budget": {"max_tokens": 10000}, "budget_warning": "max_tokens 82%"},
    )
    compaction = {"through": "tool:1:c1", "messages": 4, "summarized": True, "text": SUMMARY}
    compaction |= {"turn": 2, "why": "threshold", "freed": 120, "overflow": False}
    catalog.append_event(SID, "compact:2", "compaction", compaction)
    guard = {"what": "guard", "text": "not compacting: the compaction before turn 2 freed"}
    catalog.append_event(SID, "compact-guard:compact:2", "context_note", guard)
    warning = {"text": "82% of this session's max_tokens budget spent: 8,200 of 10,000"}
    catalog.append_event(SID, "budget_warning:x", "budget_warning", warning)


async def test_the_list_marks_the_budget_and_the_pane_shows_each_summary(
    store: Store, tmp_path: Path, tui: Tui
) -> None:
    catalog = Catalog.open(store.url)
    _seed(catalog, tmp_path)
    app = deck(catalog)
    async with tui(app) as pilot:
        [line] = [ln for ln in list_lines(app) if "Read app.py" in ln]
        assert "⚠ max_tokens 82%" in line, line
        pane = app.query_one(TranscriptPane)

        def labels() -> list[str]:
            return [str(n.label) for n in pane.root.children]

        await until(pilot, "the transcript", lambda: len(labels()) == 4)
        compaction, guard, budget = labels()[1:]
        assert "context 4 earlier messages summarized to fit the window, 120 tokens freed" in (
            compaction
        )
        assert "context not compacting: the compaction before turn 2" in guard
        assert "budget  82% of this session's max_tokens budget" in budget
        node = pane.root.children[1]
        assert node.allow_expand
        node.expand()
        await pilot.pause(0.1)
        folded = " ".join(str(leaf.label) for leaf in node.children)
        assert "The agent read app.py: main returns 42." in folded
