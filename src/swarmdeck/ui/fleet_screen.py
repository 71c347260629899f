"""The TUI's fleet view (key `w`): hosts, the worker processes on each, and the sessions
each holds, with the hand-over queue and the takeovers of the last hour. It reads the same
model as `swarmdeck workers` and the portal's fleet page (views/fleet_status.py), off the
UI thread, once a second."""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import Label, Tree

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import SessionRecord
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.views.fleet_status import FleetSummary, fleet_summary, held_sessions

REFRESH_SECONDS = 1.0
TITLE_WIDTH = 40
FLEET_CSS = """
FleetScreen { align: center middle; }
#fleet-box { width: 90%; max-width: 120; height: 90%; border: thick $accent;
             background: $panel; padding: 0 1; }
#fleet-head { width: 100%; }
#fleet-tree { height: 1fr; }
.hint { color: $text-muted; }
"""


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def head_line(summary: FleetSummary) -> Text:
    """The queue and the takeovers, above the tree."""
    hosts = _plural(len(summary.hosts), "host")
    queue = f"queue {summary.queue_depth} ({summary.waiting_for_a_worker} waiting for a worker)"
    taken = _plural(len(summary.takeovers_last_hour), "takeover")
    return Text(f"{hosts} · {queue} · {taken} in the last hour", style="bold")


def session_label(record: SessionRecord) -> Text:
    """One session leaf: its id, status and title."""
    title = (record.title or record.task).splitlines()[0] if (record.title or record.task) else ""
    if len(title) > TITLE_WIDTH:
        title = title[: TITLE_WIDTH - 1] + "…"
    return Text.assemble((record.id, "bold"), f"  {record.status:<14} ", title)


class FleetScreen(ModalScreen[None]):
    """Hosts → workers → sessions; escape or w goes back."""

    DEFAULT_CSS = FLEET_CSS
    BINDINGS = [Binding("escape,w,q", "dismiss", "back")]

    def __init__(self, catalog: Catalog, registry: WorkerRegistry) -> None:
        super().__init__()
        self.catalog, self.registry = catalog, registry
        self.summary: FleetSummary | None = None
        # Hosts and workers the person folded: a refresh keeps them folded.
        self.folded: set[str] = set()

    def compose(self) -> ComposeResult:
        with Vertical(id="fleet-box"):
            yield Label("fleet · reading…", id="fleet-head")
            yield Tree[str]("fleet", id="fleet-tree")
            yield Label("escape: back · enter folds a host or worker", classes="hint")

    def on_mount(self) -> None:
        """Read now, then once a second."""
        tree = self.query_one("#fleet-tree", Tree)
        tree.show_root = False
        tree.focus()
        self.load()
        self.set_interval(REFRESH_SECONDS, self.load)

    @work(thread=True, exclusive=True, group="fleet-view")
    def load(self) -> None:
        """Read the fleet off the UI thread and show it."""
        summary = fleet_summary(self.catalog, self.registry)
        held = held_sessions(self.catalog, summary)
        self.app.call_from_thread(self.show, summary, held)

    def show(self, summary: FleetSummary, held: dict[str, list[SessionRecord]]) -> None:
        """Rebuild the tree from a fresh read (a screen gone meanwhile shows nothing)."""
        try:
            tree = self.query_one("#fleet-tree", Tree)
            head = self.query_one("#fleet-head", Label)
        except NoMatches:
            return
        self.summary = summary
        head.update(head_line(summary))
        self.remember_folds(tree)
        cursor = tree.cursor_line
        tree.clear()
        if not summary.hosts:
            tree.root.add_leaf("no live workers: start one with `swarmdeck worker`")
        for host in summary.hosts:
            label = (
                f"{host.hostname}  {_plural(len(host.workers), 'worker')}"
                f" · {_plural(host.sessions_running, 'session')} running"
            )
            key = f"host:{host.hostname}"
            node = tree.root.add(Text(label, style="bold"), key, expand=key not in self.folded)
            for w in host.workers:
                line = (
                    f"{w['executor_id']}  {w['role']} · pid {w['pid']}"
                    f" · beat {w['heartbeat_age_s']:g}s ago · {w['sessions_running']} running"
                )
                sessions = held.get(w["executor_id"], [])
                key = f"worker:{w['executor_id']}"
                if not sessions:
                    node.add_leaf(line, key)
                    continue
                worker = node.add(line, key, expand=key not in self.folded)
                for record in sessions:
                    worker.add_leaf(session_label(record), f"session:{record.id}")
        tree.cursor_line = cursor

    def remember_folds(self, tree: Tree[str]) -> None:
        """Note which hosts and workers are folded, read from the tree itself before a rebuild.

        Read here rather than from the tree's NodeCollapsed messages: a refresh queued before
        a fold's message reached the screen would rebuild the host unfolded.
        """
        stack = list(tree.root.children)
        while stack:
            node = stack.pop()
            stack.extend(node.children)
            if not node.data or not node.allow_expand:
                continue
            if node.is_expanded:
                self.folded.discard(node.data)
            else:
                self.folded.add(node.data)
