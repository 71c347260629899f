"""The transcript: entries appended once per key, read after a cursor; and the marks of
`once` tools started."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from swarmdeck.catalog import fence, schema, statements
from swarmdeck.catalog.access import StoreAccess, lock_session
from swarmdeck.catalog.fence import Fenced
from swarmdeck.catalog.records import EventRecord

# Each lost race for an event's seq is retried, holding the session's lock from the second
# try on; a newcomer's lock-free first try can still win a seq, so allow many.
APPEND_ATTEMPTS = 50


class EventTables(StoreAccess):
    """The transcript (sd_events) and once-effect marks (sd_tool_marks)."""

    def append_event(
        self,
        session_id: str,
        key: str,
        kind: str,
        payload: dict[str, Any],
        usage_row: dict[str, Any] | None = None,
        *,
        wait: bool = True,
        ts: float | None = None,
        status: str | None = None,
    ) -> bool:
        """Append a transcript entry once per key; False when that key was already stored.

        A turn's usage row, when given, is written in the same transaction, and so is the
        live session's new `status`: a status change that goes with an entry costs no
        commit of its own. The entry is stamped `ts` (now, when None). With `wait` False
        on SQLite, raises WriteWouldWait (having written nothing) instead of waiting for
        another writer: the caller may then retry where waiting is harmless.
        """
        text = self._json(payload)
        params = {"b_session": session_id, "b_key": key, "b_kind": kind, "b_payload": text}
        engine = self._writer(wait)
        for attempt in range(APPEND_ATTEMPTS):
            try:
                with self._no_wait_errors(wait), engine.begin() as conn:
                    if attempt:
                        # Lost a race for the next seq: take turns with the other writers
                        # now. The first try takes no lock: a session's events are written
                        # by its one workflow nearly always, and on PostgreSQL the lock is
                        # one more round trip per write. The seq's unique index still
                        # catches a race, and the loser lands here.
                        lock_session(conn, session_id)
                    entry = {**params, "b_ts": time.time() if ts is None else ts}
                    self._append(conn, entry, usage_row, status)
                return True
            except IntegrityError:
                if self.has_event(session_id, key):
                    return False
        raise RuntimeError(f"could not append event {key} to {session_id}")

    def _append(
        self,
        conn: sa.Connection,
        entry: dict[str, Any],
        usage_row: dict[str, Any] | None,
        status: str | None = None,
    ) -> None:
        """A transcript entry (INSERT_EVENT's bound values), with the turn's usage row
        (stamped with the entry's time) and the live session's new status when given: one
        statement on PostgreSQL, a statement each on SQLite, where a statement is no
        round trip."""
        session_id = entry["b_session"]
        if not self.is_sqlite and (usage_row is not None or status is not None):
            params = dict(entry)
            if usage_row is not None:
                params.update(statements.usage_params(session_id, entry["b_ts"], usage_row))
            if status is not None:
                params.update(b_status=status, b_error=None)
            self._append_together(conn, params, usage_row is not None, status is not None)
            return
        if usage_row is not None:
            usage = {"session_id": session_id, "ts": entry["b_ts"], **usage_row}
            conn.execute(statements.INSERT_USAGE, usage)
        self._insert_event(conn, entry)
        if status is not None:
            conn.execute(statements.SET_LIVE_STATUS, self._status_params(session_id, status, None))

    def _append_together(
        self, conn: sa.Connection, params: dict[str, Any], usage: bool, status: bool
    ) -> None:
        """_append's entry with its usage row and status in one statement (see
        statements.append_with), under the session's fence as _insert_event's."""
        session_id = params["b_session"]
        epoch = fence.epoch_for(session_id)
        if epoch is not None:
            params["b_epoch"] = epoch
        landed = conn.execute(statements.append_with(epoch is not None, usage, status), params)
        if epoch is not None and landed.first() is None:
            raise Fenced(session_id)

    def last_event(self, session_id: str, kinds: Iterable[str]) -> EventRecord | None:
        """The latest transcript entry of these kinds, or None."""
        q = (
            sa.select(schema.events)
            .where(
                schema.events.c.session_id == session_id,
                schema.events.c.kind.in_(list(kinds)),
            )
            .order_by(schema.events.c.seq.desc())
            .limit(1)
        )
        with self._reads.connect() as conn:
            row = conn.execute(q).first()
        return EventRecord.from_row(row) if row else None

    def event_by_key(self, session_id: str, key: str) -> EventRecord | None:
        """The event stored under this key, or None (one indexed lookup)."""
        with self._reads.connect() as conn:
            row = conn.execute(
                sa.select(schema.events).where(
                    schema.events.c.session_id == session_id, schema.events.c.key == key
                )
            ).first()
        return EventRecord.from_row(row) if row else None

    def has_event(self, session_id: str, key: str) -> bool:
        """True when an event with this key is stored."""
        with self._reads.connect() as conn:
            found = conn.execute(
                statements.EVENT_ID_BY_KEY, {"b_session": session_id, "b_key": key}
            ).first()
        return found is not None

    def news(
        self, session_id: str, after_id: int, inbox_kinds: Iterable[str] | None, claim: str
    ) -> tuple[list[EventRecord], bool]:
        """What changed for a running session, in one round trip: its transcript entries
        after a cursor, and whether messages of these kinds (None: of any) wait in its inbox
        (or were taken under `claim` by a consumer that crashed before recording them)."""
        params = {"b_session": session_id, "b_after": after_id, "b_claim": claim}
        if inbox_kinds is None:
            statement = statements.news_of_kinds(None)
        else:
            kinds = list(inbox_kinds)
            statement = statements.news_of_kinds(len(kinds))
            params.update(statements.kind_params(kinds))
        with self._reads.connect() as conn:
            rows = conn.execute(statement, params).all()
        # No new event: the one row holds only b_mail (the events' columns are null).
        events = [_event_of(r._mapping) for r in rows if r.id is not None]
        return events, bool(rows[0].b_mail)

    def events(
        self,
        session_id: str,
        *,
        after_id: int = 0,
        kinds: Iterable[str] | None = None,
        limit: int | None = None,
    ) -> list[EventRecord]:
        """Transcript entries in order, after a cursor."""
        if kinds is None and not limit:
            with self._reads.connect() as conn:
                rows = conn.execute(
                    statements.EVENTS_AFTER, {"b_session": session_id, "b_after": after_id}
                )
                return [EventRecord.from_row(r) for r in rows]
        q = (
            sa.select(schema.events)
            .where(schema.events.c.session_id == session_id, schema.events.c.id > after_id)
            .order_by(schema.events.c.seq)
        )
        if kinds is not None:
            q = q.where(schema.events.c.kind.in_(list(kinds)))
        if limit:
            q = q.limit(limit)
        with self._reads.connect() as conn:
            return [EventRecord.from_row(r) for r in conn.execute(q)]

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


def _event_of(mapping: Any) -> EventRecord:
    """An event of a row that carries other columns beside the event's own."""
    return EventRecord.from_mapping({k: mapping[k] for k in _EVENT_COLUMNS})


_EVENT_COLUMNS = [c.name for c in schema.events.c]
