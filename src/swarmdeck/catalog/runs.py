"""A session's runs: each execution of its workflow claims it under a new epoch, and each
generation keeps what it found at its start."""

from __future__ import annotations

import json
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from swarmdeck.catalog import schema, statements
from swarmdeck.catalog.access import StoreAccess, no_session
from swarmdeck.catalog.records import SessionRecord


class RunTables(StoreAccess):
    """The runs of sessions (sd_sessions' executor, epoch and generation; sd_generations)."""

    def open_run(self, session_id: str, executor: str) -> tuple[SessionRecord, int]:
        """The session as an execution of its workflow starts to run it: claimed by this
        executor under a new epoch (see fence), marked running unless it has ended, with
        the number of model turns in its transcript. One transaction."""
        with self.engine.begin() as conn:
            row = conn.execute(
                statements.OPEN_RUN,
                {"b_session": session_id, "b_executor": executor, "b_ts": time.time()},
            ).first()
            if row is None:
                raise no_session(session_id)
            turns = conn.execute(
                statements.COUNT_OF_KIND, {"b_session": session_id, "b_kind": "assistant"}
            ).scalar_one()
        return SessionRecord.from_row(row), turns

    def claim_run(self, session_id: str, executor: str) -> tuple[int, str | None]:
        """Claim the session for a new execution of its workflow (a rerun: see open_run);
        returns the new epoch and the executor that held the session until then (read in
        the same transaction, so a rival claim cannot come between)."""
        sessions = schema.sessions
        with self.engine.begin() as conn:
            # Locked on PostgreSQL (SQLite's write transaction holds the store already).
            before = conn.execute(
                sa.select(sessions.c.executor).where(sessions.c.id == session_id).with_for_update()
            ).first()
            epoch = conn.execute(
                statements.CLAIM_RUN.returning(sessions.c.epoch),
                {"b_session": session_id, "b_executor": executor, "b_ts": time.time()},
            ).scalar()
        if before is None or epoch is None:
            raise no_session(session_id)
        return int(epoch), before[0]

    def advance_generation(self, session_id: str, current: int) -> int:
        """Move the session from generation `current` to the next; idempotent (a rerun
        after a crash finds it moved and moves it no further). Returns the next one."""
        sessions = schema.sessions
        with self.engine.begin() as conn:
            conn.execute(
                sessions.update()
                .where(sessions.c.id == session_id, sessions.c.generation == current)
                .values(generation=current + 1, updated_at=time.time())
            )
        return current + 1

    def generation_start(self, session_id: str, generation: int) -> dict[str, Any] | None:
        """What this generation's workflow stored when it started, or None."""
        with self._reads.connect() as conn:
            text = conn.execute(
                statements.GENERATION_START, {"b_session": session_id, "b_generation": generation}
            ).scalar()
        return json.loads(text) if text is not None else None

    def keep_generation_start(
        self, session_id: str, generation: int, start: dict[str, Any]
    ) -> dict[str, Any]:
        """Store what the generation found at its start, once; returns the stored one (when
        another process stored it first, its is the one that counts)."""
        row = {
            "session_id": session_id,
            "generation": generation,
            "start": self._json(start),
            "started_at": time.time(),
        }
        try:
            with self.engine.begin() as conn:
                conn.execute(statements.INSERT_GENERATION, row)
        except IntegrityError:
            stored = self.generation_start(session_id, generation)
            assert stored is not None, f"generation {generation} of {session_id} not stored"
            return stored
        return json.loads(row["start"])
