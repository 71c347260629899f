"""Token usage and cost per model turn."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from swarmdeck.catalog import schema
from swarmdeck.catalog.access import StoreAccess
from swarmdeck.catalog.records import UsageTotals

# How `usage --by` groups the ledger: by session tree (its root's id), by named agent, by
# provider:model, or by day (local time).
USAGE_GROUPS = ("tree", "agent", "model", "day")
NO_AGENT = "(no agent)"


class TurnCounts(Protocol):
    """One turn's token counts as the catalog stores them (models.types.Usage is one; the
    catalog sits below the models, so it names only what it reads)."""

    estimated: bool

    def as_dict(self) -> dict[str, int]:
        """The counts by column name."""
        ...


class UsageTables(StoreAccess):
    """Usage (sd_usage)."""

    def record_usage(
        self,
        session_id: str,
        turn: int,
        provider: str,
        model: str,
        usage: TurnCounts,
        cost_usd: float | None,
    ) -> None:
        """Store one turn's usage; a rerun of the same turn leaves the first row."""
        # Alike in shape to put_artifact's insert (artifacts.py): two tables' own columns.
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    schema.usage.insert().values(
                        session_id=session_id,
                        turn=turn,
                        provider=provider,
                        model=model,
                        cost_usd=cost_usd,
                        ts=time.time(),
                        estimated=usage.estimated,
                        **usage.as_dict(),
                    )
                )
        except IntegrityError:
            pass

    def usage_totals(
        self, session_ids: Iterable[str] | None = None, *, since: float | None = None
    ) -> UsageTotals:
        """Usage summed over the given sessions (all when None) since a time."""
        q = sa.select(schema.usage)
        if session_ids is not None:
            q = q.where(schema.usage.c.session_id.in_(list(session_ids)))
        if since is not None:
            q = q.where(schema.usage.c.ts >= since)
        totals = UsageTotals()
        with self._reads.connect() as conn:
            for r in conn.execute(q):
                totals.add(r)
        return totals

    def usage_by(
        self, by: str, session_ids: Iterable[str] | None = None, *, since: float | None = None
    ) -> dict[str, UsageTotals]:
        """Usage summed per group (one of USAGE_GROUPS) over the given sessions (all when
        None) since a time, in one statement."""
        sessions = schema.sessions
        q = sa.select(schema.usage, sessions.c.root_id, sessions.c.agent).select_from(
            schema.usage.outerjoin(sessions, sessions.c.id == schema.usage.c.session_id)
        )
        if session_ids is not None:
            q = q.where(schema.usage.c.session_id.in_(list(session_ids)))
        if since is not None:
            q = q.where(schema.usage.c.ts >= since)
        groups: dict[str, UsageTotals] = {}
        with self._reads.connect() as conn:
            for r in conn.execute(q):
                row = r._mapping
                if by == "tree":
                    key = row["root_id"] or row["session_id"]
                elif by == "agent":
                    key = row["agent"] or NO_AGENT
                elif by == "day":
                    key = dt.date.fromtimestamp(row["ts"]).isoformat()
                else:
                    key = f"{row['provider']}:{row['model']}"
                groups.setdefault(key, UsageTotals()).add(dict(row))
        return groups
