"""The guards of the maintenance tools. They hold in the tool, whatever the model asks: a
system session, a live one, one that ended within the grace period, a sub-agent (its root
is the unit) or a root with a live descendant is never removed; fleet-changing tools run
only on a turn that a person's message started."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from swarmdeck.catalog.housekeeping import SessionBrief
from swarmdeck.errors import PermissionDeniedError
from swarmdeck.tools.base import ToolContext

PERSON = "person"
ORIGIN_LABELS = {
    "cron": "a cron tick",
    "child": "a sub-agent's update",
    "parent": "a parent agent's message",
    "system": "the fleet (a system agent's start)",
}


def require_person(ctx: ToolContext, tool: str) -> None:
    """Refuse unless a person's message started this turn."""
    if ctx.origin == PERSON:
        return
    started = ORIGIN_LABELS.get(ctx.origin, f"something other than a person ({ctx.origin!r})")
    raise PermissionDeniedError(
        f"{tool} runs only on a turn a person's message started; this turn was started by "
        f"{started}. Ask a person to request it in a message."
    )


def grace_seconds(ctx: ToolContext, asked_minutes: float | None = None) -> float:
    """The grace period in force: what was asked, never less than the store's minimum."""
    floor = float(ctx.services["settings"].cleanup_grace_minutes)
    return 60.0 * max(floor, asked_minutes if asked_minutes is not None else floor)


@dataclass
class Forest:
    """Every session, by id and by parent: what the removal guards decide on."""

    by_id: dict[str, SessionBrief]
    children: dict[str, list[str]]

    @classmethod
    def of(cls, briefs: Iterable[SessionBrief]) -> Forest:
        """Index the sessions."""
        by_id = {b.id: b for b in briefs}
        children: dict[str, list[str]] = {}
        for b in by_id.values():
            if b.parent_id is not None:
                children.setdefault(b.parent_id, []).append(b.id)
        return cls(by_id, children)

    def subtree(self, session_id: str) -> list[str]:
        """The session and everything below it, parents first."""
        out, frontier = [session_id], [session_id]
        while frontier:
            frontier = [c for p in frontier for c in sorted(self.children.get(p, []))]
            out += frontier
        return out

    def is_unit(self, brief: SessionBrief) -> bool:
        """True for what is removed whole: a root, an orphan (its parent is gone), or a
        sub-agent of a system session (which never ends itself)."""
        parent = self.by_id.get(brief.parent_id) if brief.parent_id else None
        return brief.parent_id is None or parent is None or parent.system

    def refusal(self, session_id: str, grace_s: float, now: float | None = None) -> str | None:
        """Why this session may not be removed with its subtree; None when it may."""
        now = time.time() if now is None else now
        brief = self.by_id.get(session_id)
        if brief is None:
            return f"no session {session_id}"
        if not self.is_unit(brief):
            return (
                f"{session_id} is a sub-agent of {brief.parent_id}: sessions are removed "
                f"with their root ({brief.root_id})"
            )
        for sid in self.subtree(session_id):
            s = self.by_id[sid]
            whose = "" if sid == session_id else f"its descendant {sid} "
            if s.system:
                return f"{session_id}: {whose}is a system session, which is never removed"
            if not s.terminal:
                return f"{session_id}: {whose}is live ({s.status})"
            ago = now - s.updated_at
            if ago < grace_s:
                return (
                    f"{session_id}: {whose}ended {ago:.0f} s ago, within the grace period "
                    f"of {grace_s / 60:g} min"
                )
        return None

    def removable(
        self, grace_s: float, include_orphans: bool = True, now: float | None = None
    ) -> list[str]:
        """Every unit that may be removed now."""
        out = []
        for brief in sorted(self.by_id.values(), key=lambda b: b.updated_at):
            if not self.is_unit(brief):
                continue
            orphan = brief.parent_id is not None and brief.parent_id not in self.by_id
            if orphan and not include_orphans:
                continue
            if self.refusal(brief.id, grace_s, now) is None:
                out.append(brief.id)
        return out
