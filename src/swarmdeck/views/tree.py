"""The fleet as the lines of a tree: roots newest first with their children folded under
them, system agents in a group of their own, and a filter (status, text, needs me) that
keeps each match's ancestors so a match is seen where it lives."""

from __future__ import annotations

from dataclasses import dataclass

from swarmdeck.views.fleet import Fleet, SessionRow

SESSIONS_GROUP = "sessions"
SYSTEM_GROUP = "system agents"


@dataclass(frozen=True)
class TreeFilter:
    """Which sessions to show: one status (as shown), a text, or only those that need me."""

    status: str | None = None
    text: str = ""
    needs_me: bool = False

    @property
    def active(self) -> bool:
        """True when it hides anything."""
        return bool(self.status or self.text or self.needs_me)

    def matches(self, row: SessionRow) -> bool:
        """True when the row passes every part of the filter."""
        if self.needs_me and not row.needs_me:
            return False
        if self.status and row.status != self.status:
            return False
        if self.text:
            needle = self.text.lower()
            hay = " ".join(
                (row.id, row.title, row.task, row.model, row.agent or "", row.worker or "")
            ).lower()
            if needle not in hay:
                return False
        return True

    def describe(self) -> str:
        """The filter in a few words ("all" when it hides nothing)."""
        parts = []
        if self.needs_me:
            parts.append("needs me")
        if self.status:
            parts.append(f"status {self.status}")
        if self.text:
            parts.append(f"“{self.text}”")
        return ", ".join(parts) or "all"


@dataclass(frozen=True)
class TreeLine:
    """One line: a group's heading (row None) or a session at a depth."""

    row: SessionRow | None
    depth: int = 0
    group: str = SESSIONS_GROUP
    children: int = 0
    expanded: bool = False
    # False for an ancestor shown only to place a match.
    matched: bool = True
    count: int = 0  # a heading's number of sessions


def tree_lines(fleet: Fleet, expanded: set[str], filt: TreeFilter) -> list[TreeLine]:
    """The lines to show, in order. Under a filter every match shows, with its ancestors
    unfolded above it."""
    keep: set[str] | None = None
    if filt.active:
        keep = set()
        for row in fleet.rows.values():
            if filt.matches(row):
                sid: str | None = row.id
                while sid is not None and sid in fleet.rows and sid not in keep:
                    keep.add(sid)
                    sid = fleet.rows[sid].parent_id
    roots = fleet.roots()
    lines: list[TreeLine] = []
    for group, system in ((SESSIONS_GROUP, False), (SYSTEM_GROUP, True)):
        members = [r for r in roots if r.system == system and (keep is None or r.id in keep)]
        if not members and (system or keep is not None):
            continue
        lines.append(TreeLine(None, group=group, count=len(members)))
        for root in members:
            _grow(fleet, root, 0, group, expanded, keep, filt, lines)
    return lines


def _grow(
    fleet: Fleet,
    row: SessionRow,
    depth: int,
    group: str,
    expanded: set[str],
    keep: set[str] | None,
    filt: TreeFilter,
    lines: list[TreeLine],
) -> None:
    stack = [(row, depth)]
    while stack:
        row, depth = stack.pop()
        kids = [k for k in fleet.children.get(row.id, []) if keep is None or k in keep]
        is_open = bool(kids) and (keep is not None or row.id in expanded)
        lines.append(
            TreeLine(row, depth, group, len(kids), is_open, keep is None or filt.matches(row))
        )
        if is_open:
            stack.extend((fleet.rows[k], depth + 1) for k in reversed(kids))
