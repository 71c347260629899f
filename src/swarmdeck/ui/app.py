"""`swarmdeck tui`: the fleet's session tree, the selected session's live transcript and
inspector, and the actions a person takes on a session. Every read runs off the UI thread;
the store is followed by its event cursor once a second."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from rich.text import Text
from textual import work
from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import Footer, Input, Static

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.runtime.session_actions import SessionActions
from swarmdeck.ui.dialogs import ArtifactDialog
from swarmdeck.ui.fleet_screen import FleetScreen
from swarmdeck.ui.inspector import Inspector, inspector_body
from swarmdeck.ui.session_keys import SessionKeys
from swarmdeck.ui.session_list import SessionList, header_text
from swarmdeck.ui.transcript_pane import TranscriptPane
from swarmdeck.views.detail import SessionDetail, session_detail
from swarmdeck.views.fleet import ORPHANED, Fleet, FleetView
from swarmdeck.views.follow import SessionFollower
from swarmdeck.views.transcript import Transcript
from swarmdeck.views.tree import TreeFilter, TreeLine, tree_lines


# Twice a second: a change made elsewhere shows within a second.
def while_shown(method: Callable[..., None]) -> Callable[..., None]:
    """A result a thread hands back after the screen went away (on quit) is dropped."""

    @functools.wraps(method)
    def guarded(self: DeckApp, *args: object) -> None:
        try:
            method(self, *args)
        except NoMatches:  # its widgets are gone: the app is closing
            return

    return guarded


POLL_SECONDS = 0.5
# The order `f` steps through; the statuses that want a person come first.
FILTER_ORDER = (
    "input_required",
    ORPHANED,
    "failed",
    "running",
    "waiting",
    "idle",
    "pending",
    "completed",
    "cancelled",
    "budget_exceeded",
)


@dataclass
class Followed:
    """The selected session as the UI follows it."""

    session_id: str
    follower: SessionFollower
    transcript: Transcript = field(default_factory=Transcript)
    detail: SessionDetail | None = None


class DeckApp(SessionKeys, App[None]):
    """The terminal UI over the read model (swarmdeck.views)."""

    TITLE = "swarmdeck"
    # Its key would take room in the footer, which shows every key of the app instead.
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #bar { height: 1; background: $primary-background; padding: 0 1; }
    #body { height: 1fr; }
    #left { width: 3fr; min-width: 60; }
    #right { width: 2fr; border-left: solid $primary; }
    #columns { height: 1; color: $text-muted; }
    #search { dock: bottom; height: 1; border: none; padding: 0 1; }
    #inspect { height: 1fr; border-bottom: solid $primary; }
    #transcript { height: 1fr; }
    """
    BINDINGS = [
        # Priority: run as the app reads the key, so the keys (or the paste) that came with
        # it go to the search line; as an ordinary binding it ran only once the list had
        # handled the `/`, and whatever arrived meanwhile went to the list (its bindings).
        Binding("slash", "search", "search", priority=True),
        Binding("f", "filter_status", "filter"),
        Binding("n", "needs_me", "needs me"),
        Binding("escape", "clear_filter", "clear"),
        Binding("s", "send", "send"),
        Binding("a", "answer", "answer"),
        Binding("c", "cancel", "cancel"),
        Binding("r", "resume", "resume"),
        Binding("o", "open_artifact", "open"),
        Binding("y", "copy_id", "copy"),
        Binding("p", "parent", "parent"),
        Binding("i", "child", "child"),
        # Not in the footer, which has no room left at 140 columns: README lists it.
        Binding("w", "fleet", "fleet", show=False),
        # Before the screen's own tab (focus next), so the footer shows it.
        Binding("tab", "switch_pane", "pane", priority=True),
        Binding("q", "quit", "quit"),
    ]

    def __init__(
        self,
        catalog: Catalog,
        registry: WorkerRegistry,
        *,
        clock: Callable[[], float] = time.time,
        poll_seconds: float = POLL_SECONDS,
        actions: SessionActions | None = None,
    ) -> None:
        super().__init__()
        self.catalog = catalog
        self.registry = registry
        self.view = FleetView(catalog, registry)
        self.clock = clock
        self.poll_seconds = poll_seconds
        self.actions = actions or SessionActions()
        self.fleet: Fleet | None = None
        self.expanded: set[str] = set()
        self.filter = TreeFilter()
        self.followed: Followed | None = None
        self.loaded_at: float | None = None  # when the first fleet was on screen
        self.load_cpu_s: float | None = None  # CPU seconds its first read took
        self._refreshing = False

    # -- layout ------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static("swarmdeck · loading…", id="bar")
        with Horizontal(id="body"):
            with Vertical(id="left"):
                yield Static(id="columns")
                yield SessionList(self.clock, id="sessions")
                yield Input(placeholder="/ searches: id, title, task, model, worker", id="search")
            with Vertical(id="right"):
                with VerticalScroll(id="inspect"):
                    yield Inspector("select a session", id="inspector")
                yield TranscriptPane(id="transcript")
        yield Footer(compact=True)

    @property
    def session_list(self) -> SessionList:
        """The tree of sessions."""
        return self.query_one("#sessions", SessionList)

    @property
    def transcript(self) -> TranscriptPane:
        """The selected session's transcript."""
        return self.query_one("#transcript", TranscriptPane)

    def on_mount(self) -> None:
        """Read the fleet (off this thread), then follow it."""
        self.session_list.focus()
        self.load_fleet()
        self.set_interval(self.poll_seconds, self.poll)

    @while_shown
    def on_session_list_resized(self, message: SessionList.Resized) -> None:
        """Column names follow the list's width."""
        self.query_one("#columns", Static).update(header_text(message.width))

    # -- reading (threads) -------------------------------------------------------------

    @work(thread=True, group="fleet")
    def load_fleet(self) -> None:
        """The first read of the whole fleet."""
        started = time.thread_time()
        fleet = self.view.load()
        lines = tree_lines(fleet, set(self.expanded), self.filter)
        self.load_cpu_s = time.thread_time() - started
        self.call_from_thread(self.show_fleet, fleet, lines)

    @while_shown  # its timer may tick once more while the app closes
    def poll(self) -> None:
        """Twice a second: redraw the ages and timers that moved, and look for changes in
        the store (off this thread)."""
        self.session_list.redraw_if_stale()
        if self.fleet is None or self._refreshing:
            return
        self._refreshing = True
        self.refresh_fleet(self.fleet, self.followed)

    # A description of its own: the default one is the repr of its arguments, a whole fleet.
    @work(thread=True, group="refresh", description="refresh the fleet")
    def refresh_fleet(self, fleet: Fleet, followed: Followed | None) -> None:
        """What changed since the last look: the fleet's rows, the selected transcript."""
        try:
            fleet, changed = self.view.refresh(fleet)
            lines = tree_lines(fleet, set(self.expanded), self.filter) if changed else None
            entries = None
            detail = None
            # The event cursor moved for it, or its row changed: nothing else to read.
            if followed is not None and followed.session_id in changed:
                entries = followed.transcript.add(followed.follower.poll())
                detail = self._detail(followed)
            self.call_from_thread(self.apply_refresh, fleet, lines, followed, entries, detail)
        finally:
            self._refreshing = False

    def _detail(self, followed: Followed) -> SessionDetail:
        detail = session_detail(
            self.catalog,
            self.registry,
            followed.session_id,
            with_events=False,
            prefix=self._prefix(followed.session_id),
        )
        if followed.detail is not None and detail.context is None:
            detail.context = followed.detail.context
        return detail

    def _prefix(self, session_id: str) -> str | None:
        row = self.fleet.rows.get(session_id) if self.fleet else None
        return row.prefix if row else None

    @work(thread=True, exclusive=True, group="select")
    def follow_session(self, session_id: str) -> None:
        """Read the selected session whole: its detail and transcript."""
        detail = session_detail(
            self.catalog, self.registry, session_id, prefix=self._prefix(session_id)
        )
        cursor = max((e.id for e in detail.events), default=0)
        followed = Followed(session_id, SessionFollower(self.catalog, session_id, cursor))
        followed.transcript.add(detail.events)
        followed.detail = detail
        detail.events = []  # the transcript keeps them as entries
        self.call_from_thread(self.show_followed, followed)

    # -- showing (UI thread) -----------------------------------------------------------

    @while_shown
    def show_fleet(self, fleet: Fleet, lines: list[TreeLine]) -> None:
        """Put a fleet on screen."""
        self.fleet = fleet
        self.session_list.set_lines(lines)
        self.update_bar()
        if self.loaded_at is None:
            self.loaded_at = time.monotonic()

    @while_shown
    def apply_refresh(
        self,
        fleet: Fleet,
        lines: list[TreeLine] | None,
        followed: Followed | None,
        entries: list | None,
        detail: SessionDetail | None,
    ) -> None:
        """Apply what a refresh read, if it still concerns what is on screen."""
        self.fleet = fleet
        if lines is not None:
            self.session_list.set_lines(lines)
        if followed is not None and followed is self.followed:
            if entries:
                self.transcript.add_entries(entries)
            if detail is not None:
                followed.detail = detail
                self.show_detail(detail)
        if lines is not None:
            self.update_bar()

    @while_shown
    def show_followed(self, followed: Followed) -> None:
        """Show a freshly selected session (unless the cursor has moved on)."""
        if self.session_list.selected_id != followed.session_id:
            return
        self.followed = followed
        self.transcript.show_session(followed.session_id, followed.transcript.entries)
        if followed.detail is not None:
            self.show_detail(followed.detail)

    def show_detail(self, detail: SessionDetail) -> None:
        """Fill the inspector."""
        self.query_one("#inspector", Inspector).update(inspector_body(detail, self.clock()))

    def update_bar(self) -> None:
        """The line at the top: the store, counts, who needs you, workers, the filter."""
        if self.fleet is None:
            return
        rows = self.fleet.rows.values()
        needs = sum(1 for r in rows if r.needs_me)
        running = sum(1 for r in rows if r.status == "running")
        orphaned = sum(1 for r in rows if r.status == ORPHANED)
        workers = sum(1 for w in self.fleet.workers.values() if w.role == "worker")
        alive = sum(
            1
            for w in self.fleet.workers.values()
            if w.role == "worker" and w.executor_id in self.fleet.alive
        )
        bar = Text("swarmdeck", style="bold")
        bar.append(f" · {self.catalog.engine.dialect.name} · {len(self.fleet.rows)} sessions")
        bar.append(f" · {running} running")
        if needs:
            bar.append(" · ")
            bar.append(f" {needs} need you ", style="bold white on magenta")
        if orphaned:
            bar.append(f" · {orphaned} orphaned", style="bold red")
        bar.append(f" · workers {alive}/{workers} alive")
        bar.append(
            f" · filter: {self.filter.describe()}", style="bold" if self.filter.active else "dim"
        )
        self.query_one("#bar", Static).update(bar)

    def relayout(self) -> None:
        """Rebuild the tree's lines after a fold, a filter or a jump."""
        if self.fleet is not None:
            self.session_list.set_lines(tree_lines(self.fleet, self.expanded, self.filter))
            self.update_bar()

    # -- events from widgets -----------------------------------------------------------

    def on_session_list_selected(self, message: SessionList.Selected) -> None:
        """The cursor moved: follow that session."""
        self.followed = None
        if message.session_id is None:
            return
        self.follow_session(message.session_id)

    def on_session_list_toggled(self, message: SessionList.Toggled) -> None:
        """Fold or unfold a session's children."""
        if message.expand:
            self.expanded.add(message.session_id)
        else:
            self.expanded.discard(message.session_id)
        self.relayout()

    def on_input_changed(self, event: Input.Changed) -> None:
        """Search as the person types."""
        if event.input.id == "search":
            self.filter = replace(self.filter, text=event.value.strip())
            self.relayout()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the search keeps the filter and goes back to the list."""
        if event.input.id == "search":
            self.screen.set_focus(self.session_list)

    # -- actions -----------------------------------------------------------------------

    def _selected(self) -> str | None:
        sid = self.session_list.selected_id
        if sid is None:
            self.notify("select a session first", severity="warning")
        return sid

    def action_search(self) -> None:
        """Open the search line."""
        # The priority `/` searches from the main screen only: in the search line or a
        # dialog's field it is text (skipped, the key goes on to the focused widget).
        if len(self.screen_stack) > 1 or isinstance(self.focused, Input):
            raise SkipAction()
        # At once, not on the next refresh: the keys typed after `/` are the search's.
        self.screen.set_focus(self.query_one("#search", Input))

    def action_filter_status(self) -> None:
        """Step the status filter to the next status (then back to all)."""
        current = self.filter.status
        order = (None, *FILTER_ORDER)
        self.filter = replace(self.filter, status=order[(order.index(current) + 1) % len(order)])
        self.relayout()

    def action_needs_me(self) -> None:
        """Show only the sessions waiting for your answer (again: all)."""
        self.filter = replace(self.filter, needs_me=not self.filter.needs_me)
        self.relayout()

    def action_clear_filter(self) -> None:
        """Show everything again."""
        self.query_one("#search", Input).value = ""
        self.filter = TreeFilter()
        self.screen.set_focus(self.session_list)
        self.relayout()

    def action_switch_pane(self) -> None:
        """Move between the tree and the transcript (in a dialog: to its next field)."""
        if len(self.screen_stack) > 1:
            self.screen.focus_next()
        elif self.session_list.has_focus:
            self.transcript.focus()
        else:
            self.session_list.focus()

    def action_copy_id(self) -> None:
        """Copy the selected session's full id to the clipboard (and show it)."""
        sid = self._selected()
        if sid:
            self.copy_to_clipboard(sid)
            self.notify(f"copied {sid}")

    def action_parent(self) -> None:
        """Jump to the selected session's parent."""
        sid = self._selected()
        row = self.fleet.rows.get(sid) if sid and self.fleet else None
        if row is None or row.parent_id is None:
            self.notify("this session has no parent", severity="warning")
            return
        self.jump(row.parent_id)

    def action_child(self) -> None:
        """Jump to the selected session's first sub-agent (unfolding it)."""
        sid = self._selected()
        kids = self.fleet.children.get(sid, []) if sid and self.fleet else []
        if not kids:
            self.notify("this session has no sub-agents", severity="warning")
            return
        self.jump(kids[0])

    def jump(self, session_id: str) -> None:
        """Select a session, unfolding the sessions above it."""
        if self.fleet is None:
            return
        parent = self.fleet.rows[session_id].parent_id if session_id in self.fleet.rows else None
        while parent is not None and parent in self.fleet.rows:
            self.expanded.add(parent)
            parent = self.fleet.rows[parent].parent_id
        self.relayout()
        if not self.session_list.select(session_id):
            self.notify("that session is hidden by the filter (escape clears it)")

    def action_open_artifact(self) -> None:
        """Read the selected session's artifacts."""
        detail = self.followed.detail if self.followed else None
        if detail is None or not detail.artifacts:
            self.notify("this session has no artifacts", severity="warning")
            return
        self.push_screen(ArtifactDialog(detail.artifacts))

    def action_fleet(self) -> None:
        """Open the fleet view: hosts, their workers and the sessions each holds."""
        self.push_screen(FleetScreen(self.catalog, self.registry))
