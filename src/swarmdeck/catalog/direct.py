"""The catalog over the bare DB-API driver (sqlite3, psycopg), without SQLAlchemy: the few
reads and writes of a session handed to the fleet and followed from here.

The fleet path of `dispatch` and `run` must reach its first model request within a few
hundred milliseconds of its start, and SQLAlchemy alone takes longer than that to import
on a slow machine. The statements here are the catalog's (schema.py names the tables and
columns); tests run both paths on both stores, so the two stay in step.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmdeck.catalog.direct_workspaces import DirectWorkspaceTables
from swarmdeck.catalog.liveness import WorkerRow
from swarmdeck.catalog.nul_text import SESSION_TEXT_COLUMNS, escape_nul, unescape_nul
from swarmdeck.catalog.records import EventRecord, SessionRecord, UsageTotals
from swarmdeck.errors import NotFoundError

# The PostgreSQL channel a session handed to the fleet is announced on (both paths).
HANDOVER_CHANNEL = "swarmdeck_handover"
# Told of each message a worker must ring a session for (PostgreSQL; see InboxTables._post).
MAIL_CHANNEL = "swarmdeck_mail"
_WORKER_COLUMNS = (
    "executor_id, hostname, pid, pid_start, started_at, heartbeat_at, stopped, "
    "recovered_by, recovered_at, role, sandbox, sandbox_reason"
)
_NAMED = re.compile(r":(\w+)")


def _identity(text: str) -> str:
    return text


class DirectCatalog(DirectWorkspaceTables):
    """A connection to the store for one process that hands sessions to the fleet."""

    def __init__(self, store_url: str, redact: Callable[[str], str] = _identity) -> None:
        self.store_url = store_url
        self.redact = redact
        self.is_sqlite = store_url.startswith("sqlite")
        self._conn: Any = None

    @classmethod
    def open_existing(
        cls, store_url: str, redact: Callable[[str], str] = _identity
    ) -> DirectCatalog | None:
        """A client for a store that exists; None for a SQLite file not made yet (no
        fleet can serve a store that does not exist)."""
        if store_url.startswith("sqlite:///") and not Path(store_url[10:]).is_file():
            return None
        return cls(store_url, redact)

    def _connect(self) -> Any:
        if self._conn is None:
            if self.is_sqlite:
                # Used from one thread at a time (the follower hops threads: check off).
                conn = sqlite3.connect(
                    self.store_url[10:], timeout=30, isolation_level=None, check_same_thread=False
                )
                conn.row_factory = sqlite3.Row
                conn.execute("PRAGMA busy_timeout=30000")
            else:
                import psycopg
                from psycopg.rows import dict_row

                conn = psycopg.connect(
                    self.store_url, autocommit=True, connect_timeout=10, row_factory=dict_row
                )
            self._conn = conn
        return self._conn

    def close(self) -> None:
        """Close the connection (reopened on the next call)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _sql(self, text: str) -> str:
        return text if self.is_sqlite else _NAMED.sub(r"%(\1)s", text)

    def _rows(self, text: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        cursor = self._connect().execute(self._sql(text), params)
        return [dict(r) for r in cursor.fetchall()]

    def _write(self, statements: list[tuple[str, dict[str, Any]]]) -> None:
        """Run these statements in one transaction."""
        conn = self._connect()
        if self.is_sqlite:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for text, params in statements:
                    conn.execute(text, params)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        else:
            with conn.transaction():
                for text, params in statements:
                    conn.execute(self._sql(text), params)

    def has_catalog(self) -> bool:
        """True once the store holds the catalog's tables (a store no swarmdeck process
        opened yet has none)."""
        try:
            self._rows("SELECT id FROM sd_sessions LIMIT 1", {})
        except Exception as exc:
            if _missing_table(exc):
                self.close()
                return False
            raise
        return True

    # -- the fleet ---------------------------------------------------------------------

    def fleet_workers(self, hostname: str, lease_s: float) -> list[WorkerRow]:
        """The live fleet workers (role `worker`) serving this store."""
        now = time.time()
        try:
            rows = self._rows(
                f"SELECT {_WORKER_COLUMNS} FROM sd_workers WHERE role = 'worker' AND "
                "stopped = :no AND recovered_by IS NULL AND heartbeat_at > :since",
                {"no": False, "since": now - lease_s},
            )
        except Exception as exc:  # a store no worker ever served has no such table
            if _missing_table(exc):
                self.close()
                return []
            raise
        workers = [_worker_row(r) for r in rows]
        return [w for w in workers if w.alive(now, hostname, lease_s)]

    def hand_over(self, row: dict[str, Any], task: str) -> None:
        """Store a new session handed to the fleet (no executor), with its task as the first
        entry of its transcript, in one transaction; tell the listening workers."""
        now = time.time()
        values = {
            **row,
            "status": "pending",
            "title": self._text(row.get("title")),
            "task": self._text(task),
            "system_message": self._text(row.get("system_message")),
            "tool_names": json.dumps(row["tool_names"])
            if row.get("tool_names") is not None
            else None,
            "options": json.dumps(row.get("options") or {}),
            "generation": 0,
            "created_at": now,
            "updated_at": now,
            "executor": None,
            "epoch": 0,
        }
        columns = ", ".join(values)
        marks = ", ".join(f":{c}" for c in values)
        event = {
            "sid": row["id"],
            "payload": self.redact(json.dumps({"text": task}, ensure_ascii=False, default=str)),
            "ts": now,
        }
        statements = [
            (f"INSERT INTO sd_sessions ({columns}) VALUES ({marks})", values),
            (
                "INSERT INTO sd_events (session_id, seq, key, kind, payload, ts) "
                "VALUES (:sid, 1, 'task', 'task', :payload, :ts)",
                event,
            ),
        ]
        if not self.is_sqlite:
            statements.append((f"NOTIFY {HANDOVER_CHANNEL}", {}))
        self._write(statements)

    def _text(self, text: str | None) -> str | None:
        """Free text as the catalog stores it: redacted, NUL escaped (see nul_text)."""
        return escape_nul(self.redact(text)) if text else None

    def worker(self, executor_id: str) -> WorkerRow | None:
        """The registered executor (alive or not), or None."""
        rows = self._rows(
            f"SELECT {_WORKER_COLUMNS} FROM sd_workers WHERE executor_id = :eid",
            {"eid": executor_id},
        )
        return _worker_row(rows[0]) if rows else None

    def take_back(self, session_id: str, executor: str) -> bool:
        """Claim a hand-over no worker took, to run it here; False when a worker took it."""
        conn = self._connect()
        cursor = conn.execute(
            self._sql(
                "UPDATE sd_sessions SET executor = :executor WHERE id = :sid AND "
                "executor IS NULL AND status = 'pending'"
            ),
            {"executor": executor, "sid": session_id},
        )
        return cursor.rowcount == 1

    # -- reading a session ---------------------------------------------------------------

    def find_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None."""
        rows = self._rows("SELECT * FROM sd_sessions WHERE id = :sid", {"sid": session_id})
        if not rows:
            return None
        row = rows[0]
        for column in SESSION_TEXT_COLUMNS:
            if isinstance(row[column], str):
                row[column] = unescape_nul(row[column])
        return SessionRecord.from_mapping(row)

    def get_session(self, session_id: str) -> SessionRecord:
        """The session, or NotFoundError."""
        record = self.find_session(session_id)
        if record is None:
            raise NotFoundError(f"no session {session_id}", "list sessions: swarmdeck sessions ls")
        return record

    def events(self, session_id: str, *, after_id: int = 0) -> list[EventRecord]:
        """Transcript entries in order, after a cursor."""
        rows = self._rows(
            "SELECT * FROM sd_events WHERE session_id = :sid AND id > :after ORDER BY seq",
            {"sid": session_id, "after": after_id},
        )
        return [EventRecord.from_mapping(r) for r in rows]

    def usage_totals(self, session_ids: list[str], *, since: float | None = None) -> UsageTotals:
        """Usage summed over these sessions since a time."""
        marks = ", ".join(f":s{i}" for i in range(len(session_ids)))
        params: dict[str, Any] = {f"s{i}": sid for i, sid in enumerate(session_ids)}
        text = f"SELECT * FROM sd_usage WHERE session_id IN ({marks})"
        if since is not None:
            text += " AND ts >= :since"
            params["since"] = since
        totals = UsageTotals()
        for row in self._rows(text, params):
            totals.add(row)
        return totals

    def artifact_names(self, session_id: str, since: float | None) -> list[str]:
        """Names of the session's artifacts (written since a time), oldest first."""
        text = "SELECT name FROM sd_artifacts WHERE session_id = :sid"
        params: dict[str, Any] = {"sid": session_id}
        if since is not None:
            text += " AND ts >= :since"
            params["since"] = since
        return [r["name"] for r in self._rows(text + " ORDER BY ts", params)]


def is_driver_error(exc: BaseException) -> bool:
    """True for an error of the database driver (the store is unusable or unreachable), as
    opposed to a bug of ours."""
    return isinstance(exc, sqlite3.Error) or type(exc).__module__.startswith("psycopg")


def _worker_row(row: dict[str, Any]) -> WorkerRow:
    return WorkerRow(**{**row, "stopped": bool(row["stopped"])})


def _missing_table(exc: Exception) -> bool:
    text = str(exc).lower()
    return "no such table" in text or "does not exist" in text
