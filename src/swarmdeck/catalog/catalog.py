"""The session catalog: sessions, the event transcript, usage, tool marks and workers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from swarmdeck.catalog import fence, migrations, schema, statements
from swarmdeck.catalog.blackboard import delete_scopes_of
from swarmdeck.catalog.db import create_db_engine, is_store_failure, store_error
from swarmdeck.catalog.fence import Fenced
from swarmdeck.catalog.records import (
    TERMINAL_STATUSES,
    EventRecord,
    InboxItem,
    InboxPost,
    SessionRecord,
    UsageTotals,
    system_session_id,
)
from swarmdeck.errors import NotFoundError, UsageError
from swarmdeck.models.types import Usage

Redact = Callable[[str], str]


# Each lost race for an event's seq is retried, holding the session's lock from the second
# try on; a newcomer's lock-free first try can still win a seq, so allow many.
APPEND_ATTEMPTS = 50
# After a no-wait write found the lock taken, no-wait writes give up at once for this long:
# under contention most tries fail, and a failed try cost about what the write itself does
# (1,000 sessions on SQLite: three of every four on-loop writes failed, then ran in a thread).
NO_WAIT_PAUSE_S = 0.05
# The PostgreSQL channel a session handed to the fleet is announced on.
HANDOVER_CHANNEL = "swarmdeck_handover"


def _lock_session(conn: sa.Connection, session_id: str) -> None:
    """Serialize writers of one session (see statements.LOCK_SESSION). SQLite has no row
    locks: there the transaction's first write takes the database's write lock instead."""
    if conn.dialect.name != "sqlite":
        conn.execute(statements.LOCK_SESSION, {"b_session": session_id})


def _identity(text: str) -> str:
    return text


def _no_session(session_id: str) -> NotFoundError:
    return NotFoundError(f"no session {session_id}", "list sessions with `swarmdeck sessions ls`")


def _refuse_secret_id(redact: Redact, value: str, what: str) -> None:
    """Ids are stored and compared as given, so one holding a key is refused, not redacted
    (a redacted id would no longer deduplicate); the error does not echo it."""
    if redact(value) != value:
        raise UsageError(f"{what} refused: it contains a credential", f"pick another {what}")


class WriteWouldWait(Exception):
    """A no-wait write found the database locked by another writer; nothing was written."""


class Catalog:
    """All catalog reads and writes; every persisted text passes the redaction filter."""

    def __init__(self, engine: sa.Engine, redact: Redact = _identity) -> None:
        self.engine = engine
        self.redact = redact
        # SQLite in WAL mode: a reader never waits for a writer's lock, and a write can be
        # tried without waiting (see append_event's `wait`).
        self.is_sqlite = engine.dialect.name == "sqlite"
        # Reads on PostgreSQL run outside a transaction: READ COMMITTED gives each statement
        # its own snapshot anyway, and the BEGIN and ROLLBACK around a read were two more
        # network round trips (a read measured 1.0 ms, then 0.7). SQLite's driver opens no
        # transaction for a read.
        self._reads = (
            engine if self.is_sqlite else engine.execution_options(isolation_level="AUTOCOMMIT")
        )
        self._no_wait_engine: sa.Engine | None = None
        self._no_wait_paused_until = 0.0

    @classmethod
    def open(cls, store_url: str, redact: Redact = _identity) -> Catalog:
        """Connect to the store and create the catalog tables if they are missing.

        A store that cannot be used (corrupt, a directory, read-only, unreachable) is a
        StoreError saying what to do; this is where every command opens it.
        """
        try:
            engine = create_db_engine(store_url)
            for attempt in range(5):
                try:
                    migrations.create_all(engine)
                    break
                except (IntegrityError, ProgrammingError, OperationalError):
                    # Two processes creating tables at once: the loser retries and finds them.
                    if attempt == 4:
                        raise
                    time.sleep(0.1 * (attempt + 1))
        except Exception as exc:
            if is_store_failure(exc):
                raise store_error(store_url, exc) from exc
            raise
        return cls(engine, redact)

    def _json(self, value: Any) -> str:
        return self.redact(json.dumps(value, ensure_ascii=False, default=str))

    # -- sessions ---------------------------------------------------------------------

    def create_session(self, **spec: Any) -> SessionRecord:
        """Insert a pending session with its task as the transcript's first entry, in one
        transaction; inserting the same id again returns the stored one. `spec` holds
        new_session_row's arguments."""
        return self.create_sessions([spec])[0]

    def create_sessions(self, specs: list[dict[str, Any]]) -> list[SessionRecord]:
        """Insert pending sessions (each spec new_session_row's arguments) in one
        transaction: a thousand handed to the fleet at once took one write lock each, which
        the workers running the first ones kept taking too (14-30 ms a session). Should one
        id be stored already, each is inserted on its own, as create_session would."""
        built = [self._new_session_row(**spec) for spec in specs]
        if not built:
            return []
        try:
            with self.engine.begin() as conn:
                conn.execute(schema.sessions.insert(), [row for row, _, _ in built])
                conn.execute(statements.INSERT_EVENT, [event for _, event, _ in built])
        except IntegrityError:
            if len(specs) == 1:
                return [self.get_session(specs[0]["session_id"])]
            return [self.create_session(**spec) for spec in specs]
        return [record for _, _, record in built]

    def _new_session_row(
        self,
        *,
        session_id: str,
        model: str,
        mode: str,
        workdir: str,
        run_dir: str,
        task: str,
        parent_id: str | None = None,
        root_id: str | None = None,
        depth: int = 0,
        agent: str | None = None,
        title: str | None = None,
        system_message: str | None = None,
        tool_names: list[str] | None = None,
        options: dict[str, Any] | None = None,
        executor: str | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any], SessionRecord]:
        """A new session's row, its task event, and the record a read back would return.

        `executor` is the process that will start it; None hands it to the fleet: any live
        worker takes it (see take_handover)."""
        _refuse_secret_id(self.redact, session_id, "session id")
        now = time.time()
        row = {
            "id": session_id,
            "parent_id": parent_id,
            "root_id": root_id or session_id,
            "depth": depth,
            "agent": agent,
            "model": model,
            "mode": mode,
            "workdir": workdir,
            "run_dir": run_dir,
            "status": "pending",
            "title": self.redact(title) if title else None,
            "task": self.redact(task),
            "system_message": self.redact(system_message) if system_message else None,
            "tool_names": self._json(tool_names) if tool_names is not None else None,
            "options": self._json(options or {}),
            "created_at": now,
            "updated_at": now,
            "executor": executor,
            "epoch": 0,
        }
        task_event = {
            "b_session": session_id,
            "b_key": "task",
            "b_kind": "task",
            "b_payload": self._json({"text": task}),
            "b_ts": now,
        }
        record = SessionRecord(
            **{**row, "tool_names": tool_names, "options": json.loads(row["options"])},
            result=None,
            final_text=None,
            error=None,
            generation=0,
        )
        return row, task_event, record

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

    def find_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None."""
        with self._reads.connect() as conn:
            row = conn.execute(statements.SESSION_BY_ID, {"b_session": session_id}).first()
        return SessionRecord.from_row(row) if row else None

    def get_session(self, session_id: str) -> SessionRecord:
        """The session, or NotFoundError with a hint."""
        record = self.find_session(session_id)
        if record is None:
            raise _no_session(session_id)
        return record

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
                raise _no_session(session_id)
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
            raise _no_session(session_id)
        return int(epoch), before[0]

    def take_handover(self, executor: str, limit: int) -> list[tuple[str, int]]:
        """Claim up to `limit` sessions handed to the fleet (pending, no executor) for this
        executor, oldest first; returns (id, generation) of those won (another worker may
        win some). One statement: a claim per session was a write transaction each, in a
        store that every session's own writes wait on."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    sa.select(sessions.c.id)
                    .where(sessions.c.status == "pending", sessions.c.executor.is_(None))
                    .order_by(sessions.c.created_at)
                    .limit(limit)
                )
            ]
        if not ids:
            return []
        with self.engine.begin() as conn:
            won = dict(
                conn.execute(
                    sessions.update()
                    .where(
                        sessions.c.id.in_(ids),
                        sessions.c.executor.is_(None),
                        sessions.c.status == "pending",
                    )
                    .values(executor=executor)
                    .returning(sessions.c.id, sessions.c.generation)
                ).all()
            )
        return [(sid, won[sid]) for sid in ids if sid in won]  # oldest first, as listed

    def still_held_by(self, executors: list[str]) -> bool:
        """Whether a live session is still held by one of these executors (taken over, its
        new execution has not claimed it yet)."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            held = sa.exists().where(
                sessions.c.executor.in_(executors), sessions.c.status.not_in(TERMINAL_STATUSES)
            )
            return bool(conn.execute(sa.select(held)).scalar())

    def running_by_executor(self) -> dict[str, int]:
        """How many live sessions each executor runs (pending ones are not running yet)."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(sessions.c.executor, sa.func.count())
                .where(
                    sessions.c.executor.is_not(None),
                    sessions.c.status.not_in([*TERMINAL_STATUSES, "pending"]),
                )
                .group_by(sessions.c.executor)
            ).all()
        return {r[0]: r[1] for r in rows}

    def queue_depth(self) -> tuple[int, int]:
        """Sessions waiting to run: all pending ones, and of them those handed to the fleet
        that no worker took yet."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(sessions.c.executor.is_(None), sa.func.count())
                .where(sessions.c.status == "pending")
                .group_by(sessions.c.executor.is_(None))
            ).all()
        counts = {bool(r[0]): r[1] for r in rows}
        return sum(counts.values()), counts.get(True, 0)

    def pending_of(self, executors: list[str]) -> list[SessionRecord]:
        """Sessions still pending that these executors were to start."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(sessions).where(
                    sessions.c.status == "pending", sessions.c.executor.in_(executors)
                )
            )
            return [SessionRecord.from_row(r) for r in rows]

    def resolve_session_id(self, prefix: str) -> str:
        """Expand a unique id prefix, as git does for commits; a system agent's id (say
        `sweeper`) names its session (`sys-sweeper`)."""
        if self.find_session(prefix):
            return prefix
        if self.find_session(system_session_id(prefix)):
            return system_session_id(prefix)
        with self._reads.connect() as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    sa.select(schema.sessions.c.id)
                    .where(schema.sessions.c.id.like(f"{prefix}%"))
                    .limit(2)
                )
            ]
        if len(ids) == 1:
            return ids[0]
        hint = "the prefix is ambiguous" if ids else "list sessions with `swarmdeck sessions ls`"
        raise NotFoundError(f"no session {self.redact(prefix)}", hint)

    def list_sessions(
        self,
        *,
        status: str | None = None,
        parent_id: str | None = None,
        root_id: str | None = None,
        limit: int = 50,
    ) -> list[SessionRecord]:
        """Sessions, newest first."""
        q = sa.select(schema.sessions).order_by(schema.sessions.c.created_at.desc()).limit(limit)
        if status:
            q = q.where(schema.sessions.c.status == status)
        if parent_id:
            q = q.where(schema.sessions.c.parent_id == parent_id)
        if root_id:
            q = q.where(schema.sessions.c.root_id == root_id)
        with self._reads.connect() as conn:
            return [SessionRecord.from_row(r) for r in conn.execute(q)]

    def live_session_ids(self) -> list[str]:
        """Ids of every session that has not ended."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(sessions.c.id).where(sessions.c.status.not_in(TERMINAL_STATUSES))
            ).all()
        return [r[0] for r in rows]

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

    def update_session(self, session_id: str, **fields: Any) -> None:
        """Set columns of a session (status, result, final_text, error...); fenced."""
        with self.engine.begin() as conn:
            if conn.execute(self._update(session_id, fields)).rowcount == 0:
                self._check_fence(conn, session_id)

    def _check_fence(self, conn: sa.Connection, session_id: str) -> None:
        """After a fenced write changed nothing: Fenced when this execution's epoch is no
        longer the session's (an unknown session changed nothing either, and passes)."""
        epoch = fence.epoch_for(session_id)
        if epoch is None:
            return
        row = conn.execute(statements.SESSION_EPOCH, {"b_session": session_id}).first()
        if row is not None and row[0] != epoch:
            raise Fenced(session_id)

    def _update(self, session_id: str, fields: dict[str, Any]) -> sa.Update:
        fields = dict(fields)
        if "result" in fields and fields["result"] is not None:
            fields["result"] = self._json(fields["result"])
        for name in ("final_text", "error", "title"):
            if fields.get(name):
                fields[name] = self.redact(fields[name])
        if "options" in fields:
            fields["options"] = json.dumps(fields["options"])
        fields["updated_at"] = time.time()
        sessions = schema.sessions
        update = sessions.update().where(sessions.c.id == session_id).values(**fields)
        epoch = fence.epoch_for(session_id)
        return update if epoch is None else update.where(sessions.c.epoch == epoch)

    def end_session(
        self,
        session_id: str,
        key: str,
        entry: dict[str, Any],
        notice: InboxPost | None = None,
        **fields: Any,
    ) -> bool:
        """Record a session's end in one transaction: its status entry under `key`, its
        row's new columns, and the `notice` for its parent's inbox. So a parent that sees
        the session ended finds the notice too, and no crash leaves one without the other.
        The first end stored under a key wins (a cancel and a finish may race): a later one
        writes nothing and returns False."""
        event = {
            "b_session": session_id,
            "b_key": key,
            "b_kind": "status",
            "b_payload": self._json(entry),
            "b_ts": time.time(),
        }
        try:
            with self.engine.begin() as conn:
                _lock_session(conn, session_id)
                self._insert_event(conn, event)
                conn.execute(self._update(session_id, fields))
                if notice is not None:
                    self._post(conn, notice)
        except IntegrityError:
            if self.has_event(session_id, key):
                return False
            raise  # another constraint refused the end: the caller must know
        return True

    def _insert_event(self, conn: sa.Connection, params: dict[str, Any]) -> None:
        """Insert one transcript entry; under a fence, only while the epoch holds."""
        epoch = fence.epoch_for(params["b_session"])
        if epoch is None:
            conn.execute(statements.INSERT_EVENT, params)
        else:
            landed = conn.execute(statements.INSERT_EVENT_FENCED, {**params, "b_epoch": epoch})
            if landed.first() is None:
                raise Fenced(params["b_session"])

    def set_status(self, session_id: str, status: str, *, error: str | None = None) -> None:
        """Move a live session to a new status. An ended session keeps its end: a step of a
        cancelled workflow that was already running must not bring it back to life."""
        with self.engine.begin() as conn:
            conn.execute(statements.SET_LIVE_STATUS, self._status_params(session_id, status, error))

    def _status_params(self, session_id: str, status: str, error: str | None) -> dict[str, Any]:
        return {
            "b_session": session_id,
            "b_status": status,
            "b_ts": time.time(),
            "b_error": self.redact(error) if error is not None else None,
        }

    def delete_session_tree(self, session_id: str) -> list[str]:
        """Remove a session, its descendants, their transcripts and blackboards; returns the
        removed ids."""
        ids = [session_id, *self.descendant_ids(session_id)]
        with self.engine.begin() as conn:
            for table in (
                schema.events,
                schema.usage,
                schema.artifacts,
                schema.tool_marks,
                schema.inbox,
                schema.generations,
            ):
                conn.execute(table.delete().where(table.c.session_id.in_(ids)))
            delete_scopes_of(conn, ids)
            conn.execute(schema.sessions.delete().where(schema.sessions.c.id.in_(ids)))
        return ids

    def descendant_ids(self, session_id: str) -> list[str]:
        """Every session below this one, breadth first."""
        found: list[str] = []
        frontier = [session_id]
        with self._reads.connect() as conn:
            while frontier:
                rows = conn.execute(
                    sa.select(schema.sessions.c.id).where(schema.sessions.c.parent_id.in_(frontier))
                ).all()
                frontier = [r[0] for r in rows]
                found.extend(frontier)
        return found

    def live_children(self, parent_id: str) -> int:
        """How many live children the parent has (terminal ones do not count)."""
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(schema.sessions.c.status).where(schema.sessions.c.parent_id == parent_id)
            ).all()
        return sum(1 for r in rows if r[0] not in TERMINAL_STATUSES)

    # -- inbox ------------------------------------------------------------------------

    def post(self, session_id: str, msg_id: str, kind: str, payload: dict[str, Any]) -> bool:
        """Deliver a message; False when this msg_id was delivered before (a client retry)."""
        _refuse_secret_id(self.redact, msg_id, "message id")
        with self.engine.begin() as conn:
            return self._post(conn, InboxPost(session_id, msg_id, kind, payload))

    def _post(self, conn: sa.Connection, post: InboxPost) -> bool:
        """Insert a message unless its msg_id is there: never an error, so it can share a
        transaction with other writes."""
        insert = sqlite_insert if self.is_sqlite else postgresql_insert
        statement = (
            insert(schema.inbox)
            .values(
                session_id=post.session_id,
                msg_id=post.msg_id,
                kind=post.kind,
                payload=self._json(post.payload),
                created_at=time.time(),
            )
            .on_conflict_do_nothing(index_elements=["session_id", "msg_id"])
            .returning(schema.inbox.c.id)
        )
        return conn.execute(statement).first() is not None

    def drain(
        self,
        session_id: str,
        claim: str,
        kinds: Iterable[str] | None = None,
        status: str | None = None,
    ) -> list[InboxItem]:
        """Take the pending messages (of these kinds) for one consumer step, in order.

        A step rerun after a crash passes the same claim and gets the same items back.
        With `status`, a live session that took messages moves to it in the same
        transaction, so no observer sees the messages gone while the session still rests.
        """
        kinds = None if kinds is None else list(kinds)
        check, params = statements.PENDING_ANY, {"b_session": session_id, "b_claim": claim}
        if kinds is not None:
            check = statements.pending_of_kinds(len(kinds))
            params.update(statements.kind_params(kinds))
        with self._reads.connect() as conn:
            # Most drains find nothing: a read, then, and no write lock taken.
            if conn.execute(check, params).first() is None:
                return []
        inbox = schema.inbox
        pending = sa.and_(inbox.c.session_id == session_id, inbox.c.consumed_by.is_(None))
        if kinds is not None:
            pending = sa.and_(pending, inbox.c.kind.in_(kinds))
        with self.engine.begin() as conn:
            conn.execute(inbox.update().where(pending).values(consumed_by=claim))
            rows = conn.execute(
                sa.select(inbox)
                .where(inbox.c.session_id == session_id, inbox.c.consumed_by == claim)
                .order_by(inbox.c.id)
            ).all()
            if rows and status is not None:
                conn.execute(
                    statements.SET_LIVE_STATUS, self._status_params(session_id, status, None)
                )
        return [InboxItem(r.id, r.msg_id, r.kind, json.loads(r.payload)) for r in rows]

    def last_inbox_id(self) -> int:
        """The id of the newest message in any inbox (0 when none)."""
        with self._reads.connect() as conn:
            return conn.execute(sa.select(sa.func.max(schema.inbox.c.id))).scalar() or 0

    def mail_since(self, after_id: int, executor: str) -> tuple[int, list[tuple[int, str]]]:
        """Messages from someone (a user message, an answer) after a cursor, not yet taken,
        to sessions this executor runs, as (message id, session id); with the newest id of
        any inbox."""
        inbox, sessions = schema.inbox, schema.sessions
        with self._reads.connect() as conn:
            newest = conn.execute(sa.select(sa.func.max(inbox.c.id))).scalar() or 0
            rows = conn.execute(
                sa.select(inbox.c.id, inbox.c.session_id)
                .join(sessions, sessions.c.id == inbox.c.session_id)
                .where(
                    inbox.c.id > after_id,
                    inbox.c.consumed_by.is_(None),
                    inbox.c.kind.in_(["user", "answer"]),
                    sessions.c.executor == executor,
                )
            ).all()
        return newest, [(r[0], r[1]) for r in rows]

    def cancelled_since(self, since: float, executor: str) -> list[str]:
        """Sessions run by this executor that were cancelled since a time."""
        sessions = schema.sessions
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(sessions.c.id).where(
                    sessions.c.executor == executor,
                    sessions.c.status == "cancelled",
                    sessions.c.updated_at >= since,
                )
            ).all()
        return [r[0] for r in rows]

    def notify_handover(self) -> None:
        """Tell the workers listening (PostgreSQL) that a session was handed to the fleet;
        on SQLite they look often instead."""
        if not self.is_sqlite:
            with self.engine.begin() as conn:
                conn.exec_driver_sql(f"NOTIFY {HANDOVER_CHANNEL}")

    def has_message(self, session_id: str, msg_id: str) -> bool:
        """True when a message with this id was delivered to the session (taken or not)."""
        inbox = schema.inbox
        with self._reads.connect() as conn:
            row = conn.execute(
                sa.select(inbox.c.id).where(
                    inbox.c.session_id == session_id, inbox.c.msg_id == msg_id
                )
            ).first()
        return row is not None

    def delivered(self, session_id: str, msg_id_prefix: str = "") -> list[InboxItem]:
        """Every message delivered to the session (taken or not) whose id starts with the
        prefix, in order."""
        inbox = schema.inbox
        query = sa.select(inbox).where(inbox.c.session_id == session_id).order_by(inbox.c.id)
        if msg_id_prefix:
            query = query.where(inbox.c.msg_id.startswith(msg_id_prefix, autoescape=True))
        with self._reads.connect() as conn:
            rows = conn.execute(query).all()
        return [InboxItem(r.id, r.msg_id, r.kind, json.loads(r.payload)) for r in rows]

    def pending_count(self, session_id: str, kinds: Iterable[str] | None = None) -> int:
        """Messages (of these kinds) not yet taken by the session."""
        count, params = statements.COUNT_WAITING, {"b_session": session_id}
        if kinds is not None:
            kinds = list(kinds)
            count = statements.count_waiting_of_kinds(len(kinds))
            params.update(statements.kind_params(kinds))
        with self._reads.connect() as conn:
            return conn.execute(count, params).scalar_one()

    # -- events -----------------------------------------------------------------------

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

    def append_event(
        self,
        session_id: str,
        key: str,
        kind: str,
        payload: dict[str, Any],
        usage_row: dict[str, Any] | None = None,
        *,
        wait: bool = True,
    ) -> bool:
        """Append a transcript entry once per key; False when that key was already stored.

        A turn's usage row, when given, is written in the same transaction. With `wait`
        False on SQLite, raises WriteWouldWait (having written nothing) instead of waiting
        for another writer: the caller may then retry where waiting is harmless.
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
                        _lock_session(conn, session_id)
                    if usage_row is not None:
                        conn.execute(
                            statements.INSERT_USAGE,
                            {"session_id": session_id, "ts": time.time(), **usage_row},
                        )
                    self._insert_event(conn, {**params, "b_ts": time.time()})
                return True
            except IntegrityError:
                if self.has_event(session_id, key):
                    return False
        raise RuntimeError(f"could not append event {key} to {session_id}")

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
        self, session_id: str, after_id: int, inbox_kinds: Iterable[str], claim: str
    ) -> tuple[list[EventRecord], bool]:
        """What changed for a running session, in one round trip: its transcript entries
        after a cursor, and whether messages of these kinds wait in its inbox (or were
        taken under `claim` by a consumer that crashed before recording them)."""
        with self._reads.connect() as conn:
            rows = conn.execute(
                statements.EVENTS_AFTER, {"b_session": session_id, "b_after": after_id}
            )
            events = [EventRecord.from_row(r) for r in rows]
            kinds = list(inbox_kinds)
            mail = conn.execute(
                statements.pending_of_kinds(len(kinds)),
                {"b_session": session_id, "b_claim": claim, **statements.kind_params(kinds)},
            ).first()
        return events, mail is not None

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

    # -- usage ------------------------------------------------------------------------

    def record_usage(
        self,
        session_id: str,
        turn: int,
        provider: str,
        model: str,
        usage: Usage,
        cost_usd: float | None,
    ) -> None:
        """Store one turn's usage; a rerun of the same turn leaves the first row."""
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

    # -- activity ---------------------------------------------------------------------

    def touch_active(self, session_id: str, *, wait: bool = True) -> None:
        """Record that the session is working now (between transcript entries). With `wait`
        False on SQLite, raises WriteWouldWait instead of waiting for another writer."""
        with self._no_wait_errors(wait), self._writer(wait).begin() as conn:
            conn.execute(statements.TOUCH_ACTIVE, {"b_session": session_id, "b_ts": time.time()})

    # -- artifacts --------------------------------------------------------------------

    def put_artifact(self, session_id: str, name: str, path: str, size: int, sha256: str) -> None:
        """Record (or replace) an artifact's metadata."""
        table = schema.artifacts
        with self.engine.begin() as conn:
            # Replacing writers take turns (PostgreSQL: the session's row lock; SQLite: the
            # DELETE's write lock); otherwise both delete, both insert, and one fails.
            _lock_session(conn, session_id)
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
