"""The session tree as a virtualized list: only the lines on screen are drawn, so 10,000
sessions scroll as smoothly as ten (textual's DataTable and Tree lay out every row)."""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from swarmdeck.ui.badges import badge
from swarmdeck.views.fleet import SessionRow, worker_label
from swarmdeck.views.text import age
from swarmdeck.views.tree import TreeLine

# Fixed columns after the title (the title takes what is left), and the order they give
# way in when the list is narrow: the title keeps at least TITLE_MIN cells.
COLUMNS = (("model", 15), ("turns", 6), ("tokens", 8), ("cost", 9), ("worker", 13), ("age", 6))
GIVE_WAY = ("worker", "model", "cost", "turns")
TITLE_MIN = 24
LEAD = 2 + 2 + 16 + 1  # indent of a root, fold marker, badge, space


def visible_columns(width: int) -> list[tuple[str, int]]:
    """The fixed columns that fit at this width beside a readable title."""
    shown = list(COLUMNS)
    for name in GIVE_WAY:
        if width - LEAD - sum(w for _, w in shown) >= TITLE_MIN:
            break
        shown = [c for c in shown if c[0] != name]
    return shown


CURSOR = Style(bgcolor="grey27", bold=True)
UNFOCUSED = Style(bgcolor="grey19")
# Drawn lines kept (a few screens' worth at every width seen).
DRAWN_CACHE = 2000
HEADING = Style(color="bright_white", bold=True, underline=True)


def header_text(width: int) -> Text:
    """The column names above the list."""
    columns = visible_columns(width)
    fixed = sum(w for _, w in columns)
    text = Text(
        "    status".ljust(LEAD) + "title".ljust(max(6, width - fixed - LEAD)), style="bold"
    )
    for name, w in columns:
        text.append(name.rjust(w - 1) + " ", style="bold")
    return text


class SessionList(ScrollView, can_focus=True):
    """Lines of the tree; the cursor names the selected session."""

    DEFAULT_CSS = """
    SessionList { height: 1fr; background: $surface; }
    SessionList:focus { background-tint: $foreground 3%; }
    """
    BINDINGS = [
        Binding("up,k", "move(-1)", "move", key_display="↑↓"),
        Binding("down,j", "move(1)", "down", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "edge(-1)", show=False),
        Binding("end", "edge(1)", show=False),
        Binding("enter,space", "toggle", "fold"),
        Binding("right,l", "unfold", show=False),
        Binding("left,h", "fold", show=False),
    ]

    class Selected(Message):
        """The cursor moved to another session (None: to a heading)."""

        def __init__(self, session_id: str | None) -> None:
            super().__init__()
            self.session_id = session_id

    class Resized(Message):
        """The list's width changed (its column names follow)."""

        def __init__(self, width: int) -> None:
            super().__init__()
            self.width = width

    class Toggled(Message):
        """A session was folded or unfolded."""

        def __init__(self, session_id: str, expand: bool) -> None:
            super().__init__()
            self.session_id = session_id
            self.expand = expand

    def __init__(self, clock: Callable[[], float], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.clock = clock
        self.lines: list[TreeLine] = []
        self.cursor = 0
        # Drawn lines by what they show: a second's redraw of unchanged lines costs a lookup.
        self._drawn: dict[tuple[object, ...], tuple[SessionRow | None, Strip]] = {}

    # -- what is shown -----------------------------------------------------------------

    @property
    def selected_id(self) -> str | None:
        """The session under the cursor."""
        if 0 <= self.cursor < len(self.lines):
            row = self.lines[self.cursor].row
            return row.id if row else None
        return None

    def set_lines(self, lines: list[TreeLine]) -> None:
        """Show these lines, keeping the cursor on the same session when it is still there."""
        keep = self.selected_id
        self.lines = lines
        found = next((n for n, ln in enumerate(lines) if ln.row and ln.row.id == keep), None)
        if found is None:
            found = next((n for n, ln in enumerate(lines) if ln.row), 0)
        self.virtual_size = Size(self.size.width, len(lines))
        self._place(found, before=keep)
        self.refresh()

    def select(self, session_id: str) -> bool:
        """Put the cursor on this session; False when it is not shown."""
        for n, line in enumerate(self.lines):
            if line.row and line.row.id == session_id:
                self._place(n)
                return True
        return False

    def _place(self, index: int, *, before: str | None = None) -> None:
        before = before if before is not None else self.selected_id
        self.cursor = max(0, min(index, len(self.lines) - 1))
        self.scroll_to_region_of_cursor()
        self.refresh()
        if self.selected_id != before:
            self.post_message(self.Selected(self.selected_id))

    def scroll_to_region_of_cursor(self) -> None:
        """Keep the cursor on screen."""
        height = max(1, self.scrollable_content_region.height)
        top = int(self.scroll_y)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False)

    # -- keys --------------------------------------------------------------------------

    def action_move(self, step: int) -> None:
        """Move to the next session line up or down (headings are skipped)."""
        n = self.cursor + step
        while 0 <= n < len(self.lines) and self.lines[n].row is None:
            n += step
        if 0 <= n < len(self.lines):
            self._place(n)

    def action_page(self, direction: int) -> None:
        """A screenful up or down."""
        self._place(self.cursor + direction * max(1, self.scrollable_content_region.height - 1))
        if self.lines and self.lines[self.cursor].row is None:
            self.action_move(1 if direction > 0 else -1)

    def action_edge(self, direction: int) -> None:
        """The first or last session."""
        self._place(0 if direction < 0 else len(self.lines) - 1)
        if self.lines and self.lines[self.cursor].row is None:
            self.action_move(1)

    def action_toggle(self) -> None:
        """Fold or unfold the session under the cursor."""
        line = self.lines[self.cursor] if self.lines else None
        if line and line.row and line.children:
            self.post_message(self.Toggled(line.row.id, not line.expanded))

    def action_unfold(self) -> None:
        """Unfold the session under the cursor."""
        line = self.lines[self.cursor] if self.lines else None
        if line and line.row and line.children and not line.expanded:
            self.post_message(self.Toggled(line.row.id, True))

    def action_fold(self) -> None:
        """Fold the session under the cursor, or go up to its parent."""
        line = self.lines[self.cursor] if self.lines else None
        if line is None or line.row is None:
            return
        if line.expanded:
            self.post_message(self.Toggled(line.row.id, False))
        elif line.row.parent_id:
            self.select(line.row.parent_id)

    # -- drawing -----------------------------------------------------------------------

    def _key(self, index: int, width: int) -> tuple[object, ...]:
        """What line `index` shows, as a key: its row (by identity), its place in the tree,
        its age and timer as drawn, the width, and whether the cursor is on it."""
        line, now = self.lines[index], self.clock()
        row = line.row
        timing = None
        if row is not None:
            left = row.seconds_left(now)
            timing = (age(now - row.created_at), None if left is None else int(left))
        mark = (CURSOR if self.has_focus else UNFOCUSED) if index == self.cursor else None
        return (
            id(row),
            line.depth,
            line.children,
            line.expanded,
            line.matched,
            line.count,
            line.group,
            timing,
            width,
            mark,
        )

    def redraw_if_stale(self) -> None:
        """Redraw when a visible line would look different now (an age or a timer moved)."""
        top, width = int(self.scroll_y), self.size.width
        for index in range(top, min(len(self.lines), top + self.size.height)):
            cached = self._drawn.get(self._key(index, width))
            if cached is None or cached[0] is not self.lines[index].row:
                self.refresh()
                return

    def render_line(self, y: int) -> Strip:
        """One line on screen: only what is visible is ever drawn, and a line whose
        content did not change since it was last drawn is not drawn again."""
        width = self.size.width
        index = int(self.scroll_y) + y
        if index >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        line, key = self.lines[index], self._key(index, width)
        row, mark = line.row, key[-1]
        cached = self._drawn.get(key)
        if cached is not None and cached[0] is row:
            return cached[1]
        if len(self._drawn) > DRAWN_CACHE:
            self._drawn.clear()
        text = self.line_text(line, width)
        strip = Strip(list(text.render(self.app.console, end=""))).crop_extend(
            0, width, self.rich_style
        )
        if isinstance(mark, Style):
            strip = strip.apply_style(mark)
        self._drawn[key] = (row, strip)
        return strip

    def line_text(self, line: TreeLine, width: int) -> Text:
        """The text of one line at this width."""
        if line.row is None:
            return Text(f"{line.group} ({line.count})", style=HEADING)
        row = line.row
        now = self.clock()
        columns = visible_columns(width)
        fixed = sum(w for _, w in columns)
        marker = ("▾ " if line.expanded else "▸ ") if line.children else "  "
        text = Text("  " * line.depth + marker, style="dim")
        text.append_text(badge(row, now))
        text.append(" ")
        room = max(6, width - fixed - text.cell_len)
        title = Text()
        if row.swarm:
            name = "" if row.swarm == "swarm" else f" {row.swarm}"
            title.append(f"[swarm{name}] ", style="bold blue")
        if row.budget_warning and not row.stored_status.startswith("budget"):
            # 80 % of a budget spent: the run may stop soon (runtime/budget.py).
            title.append(f"[⚠ {row.budget_warning}] ", style="bold yellow")
        title.append(row.title, style="" if line.matched else "dim")
        if line.children and not line.expanded:
            title.append(f" (+{line.children})", style="dim")
        title.truncate(room - 1, overflow="ellipsis")
        title.pad_right(room - title.cell_len)
        text.append_text(title)
        cost = f"${row.cost_usd:.4f}" if row.cost_usd is not None else ""
        worker = worker_label(row.worker)
        cells = {
            "model": row.model,
            "turns": str(row.turns),
            "tokens": f"{row.tokens:,}",
            "cost": cost,
            "worker": worker,
            "age": age(now - row.created_at),
        }
        for name, w in columns:
            cell = cells[name]
            shown = cell if len(cell) < w else cell[: w - 2] + "…"
            text.append(shown.rjust(w - 1) + " ", style="dim" if not line.matched else "")
        return text

    def on_resize(self) -> None:
        """Keep the virtual width in step with the widget's."""
        self.virtual_size = Size(self.size.width, len(self.lines))
        self.post_message(self.Resized(self.size.width))
