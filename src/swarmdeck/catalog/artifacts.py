"""Artifacts' metadata (the files live in the run directory)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.access import StoreAccess, lock_session


class ArtifactTables(StoreAccess):
    """Artifacts (sd_artifacts)."""

    def put_artifact(self, session_id: str, name: str, path: str, size: int, sha256: str) -> None:
        """Record (or replace) an artifact's metadata."""
        table = schema.artifacts
        with self.engine.begin() as conn:
            # Replacing writers take turns (PostgreSQL: the session's row lock; SQLite: the
            # DELETE's write lock); otherwise both delete, both insert, and one fails.
            lock_session(conn, session_id)
            conn.execute(
                table.delete().where(table.c.session_id == session_id, table.c.name == name)
            )
            conn.execute(
                table.insert().values(
                    session_id=session_id,
                    name=name,
                    path=path,
                    size=size,
                    sha256=sha256,
                    ts=time.time(),
                )
            )

    def artifact(self, session_id: str, name: str) -> dict[str, Any] | None:
        """One artifact's metadata, or None."""
        table = schema.artifacts
        with self._reads.connect() as conn:
            row = conn.execute(
                sa.select(table).where(table.c.session_id == session_id, table.c.name == name)
            ).first()
        return dict(row._mapping) if row else None

    def artifact_names(self, session_id: str, since: float | None) -> list[str]:
        """Names of the session's artifacts (written since a time), oldest first."""
        table = schema.artifacts
        query = sa.select(table.c.name).where(table.c.session_id == session_id)
        if since is not None:
            query = query.where(table.c.ts >= since)
        with self._reads.connect() as conn:
            return [row[0] for row in conn.execute(query.order_by(table.c.ts))]

    def artifacts_of(self, session_ids: Iterable[str]) -> list[dict[str, Any]]:
        """Artifacts of these sessions, oldest first."""
        table = schema.artifacts
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(table)
                .where(table.c.session_id.in_(list(session_ids)))
                .order_by(table.c.ts)
            )
            return [dict(r._mapping) for r in rows]
