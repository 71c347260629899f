"""Reads over the whole store for those who watch it (the TUI, `sessions ls`): every
session at once, usage summed per session, and the marks that say whether anything
changed since the last look."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import SessionRecord, UsageTotals

_sessions, _events, _usage = schema.sessions, schema.events, schema.usage
# What a watcher's list needs: not the long texts (system prompt, result, final text).
_UNLISTED = ("system_message", "tool_names", "result", "final_text")
_LISTED = sa.select(*(c for c in _sessions.c if c.name not in _UNLISTED))
_NOT_READ = dict.fromkeys(_UNLISTED)

# The statement a watcher runs twice a second, built once (see statements.py): one round
# trip for the newest event id, the latest session update and the number of sessions.
_MARKS = sa.select(
    sa.select(sa.func.coalesce(sa.func.max(_events.c.id), 0)).scalar_subquery(),
    sa.select(sa.func.coalesce(sa.func.max(_sessions.c.updated_at), 0.0)).scalar_subquery(),
    sa.select(sa.func.count()).select_from(_sessions).scalar_subquery(),
)
_USAGE_SUMS = sa.select(
    _usage.c.session_id,
    sa.func.count().label("turns"),
    sa.func.sum(_usage.c.input).label("input"),
    sa.func.sum(_usage.c.output).label("output"),
    sa.func.sum(_usage.c.cache_read).label("cache_read"),
    sa.func.sum(_usage.c.cache_write).label("cache_write"),
    sa.func.sum(_usage.c.cost_usd).label("cost_usd"),
    sa.func.sum(sa.case((_usage.c.estimated, 1), else_=0)).label("estimated"),
).group_by(_usage.c.session_id)


@dataclass(frozen=True)
class StoreMarks:
    """Where the store stands: the newest event id, the latest session update, and how many
    sessions there are (a removal changes only the count)."""

    last_event_id: int
    last_update: float
    sessions: int


class Overview:
    """Store-wide reads, each one statement."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        engine = catalog.engine
        self._reads = (
            engine if catalog.is_sqlite else engine.execution_options(isolation_level="AUTOCOMMIT")
        )

    def marks(self) -> StoreMarks:
        """The store's marks now (one cheap statement)."""
        with self._reads.connect() as conn:
            last_id, last_update, count = conn.execute(_MARKS).one()
        return StoreMarks(int(last_id), float(last_update), int(count))

    def all_ids(self) -> list[str]:
        """Every session id in the store."""
        with self._reads.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(_sessions.c.id))]

    def sessions(self, ids: Iterable[str] | None = None) -> list[SessionRecord]:
        """Every session (or these), in no particular order, without their long texts
        (system_message, tool_names, result and final_text read as None)."""
        q = _LISTED
        if ids is not None:
            q = q.where(_sessions.c.id.in_(list(ids)))
        with self._reads.connect() as conn:
            return [
                SessionRecord.from_mapping({**m, **_NOT_READ}) for m in conn.execute(q).mappings()
            ]

    def touched_since(self, event_id: int, updated: float) -> set[str]:
        """Sessions with a transcript entry after `event_id`, or updated after `updated`."""
        with self._reads.connect() as conn:
            by_event = conn.execute(
                sa.select(_events.c.session_id).where(_events.c.id > event_id).distinct()
            )
            by_update = conn.execute(
                sa.select(_sessions.c.id).where(_sessions.c.updated_at > updated)
            )
            return {r[0] for r in by_event} | {r[0] for r in by_update}

    def usage(self, ids: Iterable[str] | None = None) -> dict[str, UsageTotals]:
        """Usage summed per session (all sessions, or these), one grouped statement."""
        q = _USAGE_SUMS
        if ids is not None:
            q = q.where(_usage.c.session_id.in_(list(ids)))
        found: dict[str, UsageTotals] = {}
        with self._reads.connect() as conn:
            for r in conn.execute(q):
                found[r.session_id] = UsageTotals(
                    turns=r.turns,
                    input=int(r.input or 0),
                    output=int(r.output or 0),
                    cache_read=int(r.cache_read or 0),
                    cache_write=int(r.cache_write or 0),
                    cost_usd=r.cost_usd,
                    estimated_turns=int(r.estimated or 0),
                )
        return found
