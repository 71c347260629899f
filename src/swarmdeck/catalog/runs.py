"""A session's runs: each execution of its workflow claims it under a new epoch, and each
generation keeps what it found at its start."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
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
            return self._open_run(conn, session_id, executor)

    def _open_run(
        self, conn: sa.Connection, session_id: str, executor: str
    ) -> tuple[SessionRecord, int]:
        row = conn.execute(
            statements.OPEN_RUN,
            {"b_session": session_id, "b_executor": executor, "b_ts": time.time()},
        ).first()
        if row is None:
            raise no_session(session_id)
        columns = dict(row._mapping)
        turns = int(columns.pop("turns_done"))
        return SessionRecord.from_mapping(columns), turns

    def run_start(
        self, session_id: str, generation: int
    ) -> tuple[SessionRecord, dict[str, Any] | None]:
        """The session, and what this generation stored at its start (None: not yet), in
        one read."""
        params = {"b_session": session_id, "b_generation": generation}
        with self._reads.connect() as conn:
            row = conn.execute(statements.SESSION_WITH_START, params).first()
        if row is None:
            raise no_session(session_id)
        columns = dict(row._mapping)
        start = columns.pop("generation_start")
        return SessionRecord.from_mapping(columns), json.loads(start) if start else None

    def open_run_keeping(
        self,
        session_id: str,
        executor: str,
        generation: int,
        start: dict[str, Any],
        holds: Callable[[SessionRecord, int], bool],
    ) -> tuple[SessionRecord, int, dict[str, Any] | None] | None:
        """open_run, and in the same transaction keep_generation_start's write of `start`
        (made before the claim) when `holds(record, turns)` says it still describes the
        session as claimed: one commit for both. Returns the session, its turns and the
        start as stored (None: not kept, only the claim was). None when another execution
        stored this generation's start first: then nothing was written."""
        row = self._generation_row(session_id, generation, start)
        try:
            with self.engine.begin() as conn:
                record, turns = self._open_run(conn, session_id, executor)
                kept = holds(record, turns)
                if kept:
                    conn.execute(statements.INSERT_GENERATION, row)
        except IntegrityError:
            return None
        return record, turns, json.loads(row["start"]) if kept else None

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

    def _generation_row(
        self, session_id: str, generation: int, start: dict[str, Any]
    ) -> dict[str, Any]:
        """The sd_generations row that stores a generation's start."""
        return {
            "session_id": session_id,
            "generation": generation,
            "start": self._json(start),
            "started_at": time.time(),
        }

    def keep_generation_start(
        self, session_id: str, generation: int, start: dict[str, Any]
    ) -> dict[str, Any]:
        """Store what the generation found at its start, once; returns the stored one (when
        another process stored it first, its is the one that counts)."""
        row = self._generation_row(session_id, generation, start)
        try:
            with self.engine.begin() as conn:
                conn.execute(statements.INSERT_GENERATION, row)
        except IntegrityError:
            stored = self.generation_start(session_id, generation)
            assert stored is not None, f"generation {generation} of {session_id} not stored"
            return stored
        return json.loads(row["start"])
