"""Artifacts and once-effect marks: what a session stored, and which tool calls began."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from swarmdeck.catalog import fence, schema, statements
from swarmdeck.catalog.fence import Fenced
from swarmdeck.catalog.store_base import (
    CatalogBase,
    lock_session,
)


class ArtifactRows(CatalogBase):
    """Artifacts and once-effect marks: what a session stored, and which tool calls began."""

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

    # -- once-effect marks ------------------------------------------------------------

    def mark_tool_started(self, session_id: str, call_key: str) -> bool:
        """Record that a `once` tool is starting; False when it had started before. Fenced:
        a worker whose session was taken over must not start a side effect."""
        params = {"b_session": session_id, "b_key": call_key, "b_ts": time.time()}
        epoch = fence.epoch_for(session_id)
        try:
            with self.engine.begin() as conn:
                if epoch is None:
                    conn.execute(statements.INSERT_TOOL_MARK, params)
                else:
                    fenced = {**params, "b_epoch": epoch}
                    if conn.execute(statements.INSERT_TOOL_MARK_FENCED, fenced).first() is None:
                        raise Fenced(session_id)
            return True
        except IntegrityError:
            return False
