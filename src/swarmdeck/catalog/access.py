"""What every family of catalog tables shares: the engines (a no-wait one on SQLite), the
redaction filter every stored text passes, and the fence a journaled write lands under."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from swarmdeck.catalog import fence, statements
from swarmdeck.catalog.db import create_db_engine, read_engine
from swarmdeck.catalog.fence import Fenced
from swarmdeck.errors import NotFoundError, UsageError

Redact = Callable[[str], str]

# After a no-wait write found the lock taken, no-wait writes give up at once for this long:
# under contention most tries fail, and a failed try cost about what the write itself does
# (1,000 sessions on SQLite: three of every four on-loop writes failed, then ran in a thread).
NO_WAIT_PAUSE_S = 0.05


def lock_session(conn: sa.Connection, session_id: str) -> None:
    """Serialize writers of one session (see statements.LOCK_SESSION). SQLite has no row
    locks: there the transaction's first write takes the database's write lock instead."""
    if conn.dialect.name != "sqlite":
        conn.execute(statements.LOCK_SESSION, {"b_session": session_id})


def identity(text: str) -> str:
    """The redaction filter that changes nothing."""
    return text


def no_session(session_id: str) -> NotFoundError:
    """The error for an unknown session id, with where to find the known ones."""
    return NotFoundError(f"no session {session_id}", "list sessions with `swarmdeck sessions ls`")


def refuse_secret_id(redact: Redact, value: str, what: str) -> None:
    """Ids are stored and compared as given, so one holding a key is refused, not redacted
    (a redacted id would no longer deduplicate); the error does not echo it."""
    if redact(value) != value:
        raise UsageError(f"{what} refused: it contains a credential", f"pick another {what}")


class WriteWouldWait(Exception):
    """A no-wait write found the database locked by another writer; nothing was written."""


class StoreAccess:
    """The engines, the redaction filter and the fence, for each family of tables."""

    def __init__(self, engine: sa.Engine, redact: Redact = identity) -> None:
        self.engine = engine
        self.redact = redact
        # SQLite in WAL mode: a reader never waits for a writer's lock, and a write can be
        # tried without waiting (see append_event's `wait`).
        self.is_sqlite = engine.dialect.name == "sqlite"
        self._reads = read_engine(engine)
        self._no_wait_engine: sa.Engine | None = None
        self._no_wait_paused_until = 0.0

    def _json(self, value: Any) -> str:
        return self.redact(json.dumps(value, ensure_ascii=False, default=str))

    def _writer(self, wait: bool) -> sa.Engine:
        """The engine for a write: the usual one, or (SQLite, `wait` False) one whose
        writes fail at once with WriteWouldWait when another writer holds the lock (or
        held it a moment ago: see NO_WAIT_PAUSE_S)."""
        if wait or not self.is_sqlite:
            return self.engine
        if time.monotonic() < self._no_wait_paused_until:
            raise WriteWouldWait("the store was locked a moment ago")
        if self._no_wait_engine is None:
            self._no_wait_engine = create_db_engine(
                f"sqlite:///{self.engine.url.database}", wait_for_locks=False
            )
        return self._no_wait_engine

    @contextmanager
    def _no_wait_errors(self, wait: bool) -> Iterator[None]:
        """Turn SQLite's immediate "database is locked" into WriteWouldWait for no-wait
        writes, and pause them (see NO_WAIT_PAUSE_S)."""
        try:
            yield
        except OperationalError as exc:
            if not wait and ("locked" in str(exc) or "busy" in str(exc)):
                self._no_wait_paused_until = time.monotonic() + NO_WAIT_PAUSE_S
                raise WriteWouldWait(str(exc)) from exc
            raise

    def _check_fence(self, conn: sa.Connection, session_id: str) -> None:
        """After a fenced write changed nothing: Fenced when this execution's epoch is no
        longer the session's (an unknown session changed nothing either, and passes)."""
        epoch = fence.epoch_for(session_id)
        if epoch is None:
            return
        row = conn.execute(statements.SESSION_EPOCH, {"b_session": session_id}).first()
        if row is not None and row[0] != epoch:
            raise Fenced(session_id)

    def _insert_event(self, conn: sa.Connection, params: dict[str, Any]) -> None:
        """Insert one transcript entry; under a fence, only while the epoch holds."""
        epoch = fence.epoch_for(params["b_session"])
        if epoch is None:
            conn.execute(statements.INSERT_EVENT, params)
        else:
            landed = conn.execute(statements.INSERT_EVENT_FENCED, {**params, "b_epoch": epoch})
            if landed.first() is None:
                raise Fenced(params["b_session"])

    def _status_params(self, session_id: str, status: str, error: str | None) -> dict[str, Any]:
        return {
            "b_session": session_id,
            "b_status": status,
            "b_ts": time.time(),
            "b_error": self.redact(error) if error is not None else None,
        }
