"""Token usage and cost per model turn."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from swarmdeck.catalog import schema
from swarmdeck.catalog.access import StoreAccess
from swarmdeck.catalog.records import UsageTotals


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
