"""The TUI through textual's pilot on a seeded fleet: the tree, badges, filters, the
transcript and inspector, jumps, artifacts and ids; SVG snapshots of the main screens."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import events
from textual.widgets import Input

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.ui.dialogs import ArtifactDialog
from swarmdeck.ui.transcript_pane import TranscriptPane
from tests.conftest import Store
from tests.ui.pilot_support import (
    Tui,
    assert_snapshot,
    deck,
    list_lines,
    screen_text,
    until,
)
from tests.ui.seed import REPORT, seed_fleet


async def test_tree_badges_transcript_and_inspector(store: Store, tmp_path: Path, tui: Tui) -> None:
    catalog = Catalog.open(store.url)
    s = seed_fleet(catalog, tmp_path)
    app = deck(catalog)
    async with tui(app) as pilot:
        lines = list_lines(app)
        assert lines[0] == "sessions (5)" and "system agents (1)" in lines
        # Newest root first; the coordinator's two children are folded under it.
        assert lines[1].lstrip().startswith("◷ waiting 45s") and "build watch" in lines[1]
        coordinator = next(ln for ln in lines if "release review" in ln)
        assert coordinator.startswith("▸") and "(+2)" in coordinator
        assert "! orphaned" in next(ln for ln in lines if "docs index" in ln)
        assert "? needs you" in next(ln for ln in lines if "release notes" in ln)
        assert "sweeper" in lines[lines.index("system agents (1)") + 1]
        # The badge that wants a person is a block of colour; a timer's is not.
        needs = next(ln for ln in app.session_list.lines if ln.row and ln.row.needs_me)
        assert "on magenta" in _style_at(app.session_list.line_text(needs, 100), "? needs you")
        timer = next(ln for ln in app.session_list.lines if ln.row and ln.row.id == s.waiter)
        assert " on " not in _style_at(app.session_list.line_text(timer, 100), "◷ waiting")
        # The first session is selected: its inspector and transcript are on screen.
        assert app.followed is not None and app.followed.session_id == s.waiter
        text = screen_text(app)
        assert s.waiter in text and "wait(seconds=60" in text and "Poll the build" in text
        if store.name == "sqlite":
            await assert_snapshot(pilot, "tree")
        # Unfold the coordinator and open its transcript.
        assert app.session_list.select(s.coordinator)
        await pilot.press("right")
        await until(pilot, "the coordinator's detail", lambda: _followed(app) == s.coordinator)
        lines = list_lines(app)
        at = next(n for n, ln in enumerate(lines) if "release review" in ln)
        assert "calc" in lines[at + 1] and "tests" in lines[at + 2]
        assert lines[at + 1].startswith("    ")  # one level in
        text = screen_text(app)
        for shown in ("Splitting the review.", "spawn_agent(", "429 rate limited", "child"):
            assert shown in text, shown
        assert "artifact review-report.md" in text and "div(a, b) does not check b." in text
        # A tool call is folded: its arguments and result open under it.
        pane = app.query_one(TranscriptPane)
        call = next(n for n in pane.root.children if n.data and n.data.kind == "call")
        assert call.allow_expand and not call.is_expanded
        assert "started sub-agent" in str(call.label)
        call.expand()
        await until(pilot, "the call's arguments", lambda: "arguments:" in screen_text(app))
        if store.name == "sqlite":
            await assert_snapshot(pilot, "coordinator")


def _style_at(text: Text, word: str) -> str:
    at = text.plain.index(word)
    return " ".join(str(sp.style) for sp in text.spans if sp.start <= at < sp.end)


def _followed(app) -> str | None:
    f = app.followed
    return f.session_id if f is not None and f.detail is not None else None


async def test_filter_search_and_needs_me(store: Store, tmp_path: Path, tui: Tui) -> None:
    catalog = Catalog.open(store.url)
    s = seed_fleet(catalog, tmp_path)
    app = deck(catalog)
    async with tui(app) as pilot:
        await pilot.press("n")
        rows = [ln.row.id for ln in app.session_list.lines if ln.row]
        assert rows == [s.asker]
        assert "filter: needs me" in screen_text(app)
        await until(pilot, "the asker", lambda: _followed(app) == s.asker)
        assert s.question in screen_text(app)
        if store.name == "sqlite":
            await assert_snapshot(pilot, "needs-me")
        await pilot.press("n", "slash", *"test")
        # A match deep in a tree shows with its ancestors above it, unfolded.
        rows = [ln.row.id for ln in app.session_list.lines if ln.row]
        assert rows == [s.coordinator, s.tester]
        matched = {ln.row.id: ln.matched for ln in app.session_list.lines if ln.row}
        assert matched == {s.coordinator: False, s.tester: True}
        await pilot.press("enter", "escape")
        assert len([ln for ln in app.session_list.lines if ln.row]) == 6  # roots + system
        await pilot.press("f")
        assert [ln.row.id for ln in app.session_list.lines if ln.row] == [s.asker]
        await pilot.press("f")
        assert [ln.row.id for ln in app.session_list.lines if ln.row] == [s.orphan]
        await pilot.press("f")
        assert [ln.row.id for ln in app.session_list.lines if ln.row] == [s.failed]


async def test_jumps_copy_and_artifacts(store: Store, tmp_path: Path, tui: Tui) -> None:
    catalog = Catalog.open(store.url)
    s = seed_fleet(catalog, tmp_path)
    app = deck(catalog)
    async with tui(app) as pilot:
        app.session_list.select(s.coordinator)
        await until(pilot, "the coordinator", lambda: _followed(app) == s.coordinator)
        await pilot.press("i")
        assert app.session_list.selected_id == s.reviewer
        await until(pilot, "the reviewer", lambda: _followed(app) == s.reviewer)
        assert "div is unchecked" in screen_text(app)  # its result
        await pilot.press("y")
        assert app.clipboard == s.reviewer
        await pilot.press("p")
        assert app.session_list.selected_id == s.coordinator
        await until(pilot, "the coordinator", lambda: _followed(app) == s.coordinator)
        await pilot.press("o")
        assert isinstance(app.screen, ArtifactDialog)
        await until(pilot, "the report", lambda: REPORT.splitlines()[-1] in screen_text(app))
        if store.name == "sqlite":
            # The artifact's path is the test's own: hide it from the snapshot.
            app.screen.query_one("#text").update(REPORT)
            await pilot.pause(0.05)
            await assert_snapshot(pilot, "artifact")
        await pilot.press("escape")
        assert not isinstance(app.screen, ArtifactDialog)
        await pilot.press("tab")  # to the transcript, and back
        assert app.transcript.has_focus
        await pilot.press("tab")
        assert app.session_list.has_focus
        await pilot.press("p")  # a root has no parent: said, nothing moves
        assert app.session_list.selected_id == s.coordinator


async def test_keys_and_a_paste_right_after_slash_all_reach_the_search(
    store: Store, tmp_path: Path, tui: Tui
) -> None:
    catalog = Catalog.open(store.url)
    seed_fleet(catalog, tmp_path)
    app = deck(catalog)
    async with tui(app) as pilot:
        search = app.query_one("#search", Input)
        # As a terminal delivers a fast typist's keys, or a paste without bracketed paste:
        # all at once, none waiting for the one before to be handled. Each of these keys is
        # also a binding of the list (cancel, send, answer, filter, needs me).
        typed = "csafn"
        for key in ["slash", *typed]:
            app.post_message(events.Key(key, "/" if key == "slash" else key))
        await until(pilot, "the typed search", lambda: search.value == typed)
        assert app.screen is app.screen_stack[0]  # no dialog opened by a key meant for search
        await pilot.press("escape")
        # A bracketed paste right after the slash.
        app.post_message(events.Key("slash", "/"))
        app.post_message(events.Paste("release review"))
        await until(pilot, "the pasted search", lambda: app.filter.text == "release review")
        assert search.value == "release review"
        # A slash typed in the search is text, not a new search.
        await pilot.press("slash")
        assert search.value == "release review/"


async def test_a_poll_while_the_app_closes_is_dropped(
    store: Store, tmp_path: Path, tui: Tui
) -> None:
    catalog = Catalog.open(store.url)
    seed_fleet(catalog, tmp_path)
    app = deck(catalog)
    async with tui(app):
        # As on quit: the widgets are gone and the poll timer ticks once more.
        await app.query_one("#sessions").remove()
        app.poll()
