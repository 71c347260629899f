"""Sessions: creating, reading, updating and ending them, and removing a tree."""

from __future__ import annotations

import json
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError

from swarmdeck.catalog import fence, schema, statements
from swarmdeck.catalog.access import lock_session, no_session, refuse_secret_id
from swarmdeck.catalog.blackboard import delete_scopes_of
from swarmdeck.catalog.events import EventTables
from swarmdeck.catalog.inbox import InboxTables
from swarmdeck.catalog.records import (
    TERMINAL_STATUSES,
    EndWrite,
    InboxPost,
    SessionRecord,
    TurnWrite,
    system_session_id,
)
from swarmdeck.catalog.workspaces import delete_refs_of
from swarmdeck.errors import NotFoundError

# Tries of a session's end that lost the race for its transcript's next seq.
END_ATTEMPTS = 3


class SessionTables(InboxTables, EventTables):
    """Sessions (sd_sessions), their ends and their trees. Ending one writes its status
    entry and its parent's notice in one transaction: so it sits on the transcript and the
    inbox."""

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
        refuse_secret_id(self.redact, session_id, "session id")
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

    def find_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None."""
        with self._reads.connect() as conn:
            row = conn.execute(statements.SESSION_BY_ID, {"b_session": session_id}).first()
        return SessionRecord.from_row(row) if row else None

    def get_session(self, session_id: str) -> SessionRecord:
        """The session, or NotFoundError with a hint."""
        record = self.find_session(session_id)
        if record is None:
            raise no_session(session_id)
        return record

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

    def update_session(self, session_id: str, **fields: Any) -> None:
        """Set columns of a session (status, result, final_text, error...); fenced."""
        with self.engine.begin() as conn:
            if conn.execute(self._update(session_id, fields)).rowcount == 0:
                self._check_fence(conn, session_id)

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
        # A writer's first try takes no lock (append_event), so this end can lose the race
        # for the next seq even holding the lock: it is tried again, as append_event is.
        for attempt in range(END_ATTEMPTS):
            try:
                with self.engine.begin() as conn:
                    lock_session(conn, session_id)
                    self._insert_event(conn, event)
                    conn.execute(self._update(session_id, fields))
                    if notice is not None:
                        self._post(conn, notice)
                return True
            except IntegrityError:
                if self.has_event(session_id, key):
                    return False
                if attempt == END_ATTEMPTS - 1:
                    raise  # another constraint refused the end: the caller must know
        return False

    def end_with_turn(
        self,
        session_id: str,
        turn: TurnWrite,
        end: EndWrite,
        mail: tuple[list[str], str],
        *,
        wait: bool = True,
    ) -> str:
        """Store a one-shot session's last turn and, unless messages of `mail`'s kinds wait
        for its next turn (claimed under `mail`'s claim), its end: one transaction where
        the turn and the end took one each. Returns "ended"; "turn" when only the turn was
        stored (mail waits, another end came first, or the store refused this one);
        "stored" when the turn was there already (a rerun, or another process) and nothing
        was written. `wait` as append_event's."""
        kinds, claim = mail
        mail_params = {"b_session": session_id, "b_claim": claim, **statements.kind_params(kinds)}
        turn_params = {
            "b_session": session_id,
            "b_key": turn.key,
            "b_kind": "assistant",
            "b_payload": self._json(turn.payload),
            "b_ts": turn.ts,
        }
        end_params = {**turn_params, "b_key": end.key, "b_kind": "status"}
        end_params["b_payload"] = self._json(end.entry)
        for attempt in range(END_ATTEMPTS):
            try:
                with self._no_wait_errors(wait), self._writer(wait).begin() as conn:
                    if attempt:  # lost a race for the next seq: as append_event's retries
                        lock_session(conn, session_id)
                    self._append(conn, turn_params, turn.usage_row)
                    if conn.execute(statements.pending_of_kinds(len(kinds)), mail_params).first():
                        return "turn"
                    self._insert_event(conn, end_params)
                    conn.execute(self._update(session_id, end.fields))
                    if end.notice is not None:
                        self._post(conn, end.notice)
                return "ended"
            except IntegrityError:
                if self.has_event(session_id, turn.key):
                    return "stored"
                if self.has_event(session_id, end.key):
                    return self._turn_alone(session_id, turn, wait)
            except DBAPIError:
                break
        # The store refused the end (a constraint on its final text, say): the turn must
        # not be lost with it, or a resume would ask the model again. The loop's own end
        # then fails as it would have, and says why.
        return self._turn_alone(session_id, turn, wait)

    def _turn_alone(self, session_id: str, turn: TurnWrite, wait: bool) -> str:
        """end_with_turn's turn without the end: "turn", or "stored" if it was there."""
        args = (session_id, turn.key, "assistant", turn.payload, turn.usage_row)
        return "turn" if self.append_event(*args, wait=wait, ts=turn.ts) else "stored"

    def set_status(self, session_id: str, status: str, *, error: str | None = None) -> None:
        """Move a live session to a new status. An ended session keeps its end: a step of a
        cancelled workflow that was already running must not bring it back to life."""
        with self.engine.begin() as conn:
            conn.execute(statements.SET_LIVE_STATUS, self._status_params(session_id, status, error))

    def touch_active(self, session_id: str, *, wait: bool = True) -> None:
        """Record that the session is working now (between transcript entries). With `wait`
        False on SQLite, raises WriteWouldWait instead of waiting for another writer."""
        with self._no_wait_errors(wait), self._writer(wait).begin() as conn:
            conn.execute(statements.TOUCH_ACTIVE, {"b_session": session_id, "b_ts": time.time()})

    def delete_session_tree(self, session_id: str) -> list[str]:
        """Remove a session, its descendants, their transcripts, blackboards and workspace
        refs; returns the removed ids."""
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
            delete_refs_of(conn, ids)
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
