"""The blackboard: versioned keys with compare-and-set writes and a history per key.

No write is lost silently. A write lands (a new version, kept in the key's history), or it
is told it conflicted and given the current value and version. A write given a `write_id`
is idempotent: run again (a tool call retried after a crash) it returns the version it
landed as the first time, and lands nothing new.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, OperationalError

from swarmdeck.catalog.blackboard import memory, memory_history
from swarmdeck.errors import UsageError

MAX_KEY_CHARS = 200
MAX_VALUE_BYTES = 64 * 1024
# A blind write that keeps losing the race to create a key tries again this often.
CREATE_ATTEMPTS = 20
# SQLite answers "locked" at once when two writers upgrade at the same moment.
LOCKED_ATTEMPTS = 50


@dataclass(frozen=True)
class Scope:
    """Whose blackboard: a swarm's (its coordinator's id), a session tree's (its root's
    id) or the whole store's ("*")."""

    kind: str
    id: str

    def __str__(self) -> str:
        return self.kind if self.kind == "store" else f"{self.kind} {self.id}"


@dataclass(frozen=True)
class Entry:
    """One version of a key."""

    key: str
    version: int
    value: Any
    deleted: bool
    writer: str
    ts: float
    op: str = "set"

    def as_dict(self) -> dict[str, Any]:
        """Plain data for a tool result or `--json`."""
        doc: dict[str, Any] = {"key": self.key, "version": self.version, "value": self.value}
        if self.deleted:
            doc["deleted"] = True
        return {**doc, "writer": self.writer, "ts": self.ts}


@dataclass(frozen=True)
class _Write:
    """One write as it is tried (again, when another writer won a race)."""

    scope: Scope
    key: str
    op: str  # set or delete
    text: str | None
    writer: str
    expected: int | None
    write_id: str | None


@dataclass(frozen=True)
class WriteOutcome:
    """A write that landed as `version`, or a conflict with what is there now."""

    landed: bool
    version: int
    current: Entry | None = None
    # True when this write_id had landed before: nothing new was written.
    repeated: bool = False


def check_key(key: str) -> str:
    """A usable key, or a UsageError saying why not."""
    if not key or len(key) > MAX_KEY_CHARS:
        raise UsageError(f"a key has 1 to {MAX_KEY_CHARS} characters", "pick a shorter key")
    if any(ord(c) < 32 for c in key):
        raise UsageError("a key holds no control characters", "pick another key")
    return key


def _encode(value: Any, redact: Callable[[str], str]) -> str:
    text = redact(json.dumps(value, ensure_ascii=False))
    if len(text.encode()) > MAX_VALUE_BYTES:
        raise UsageError(
            f"the value is over {MAX_VALUE_BYTES // 1024} KB",
            "store a summary, or write the full text to an artifact and store its link",
        )
    return text


def _decode(text: str | None) -> Any:
    return json.loads(text) if text is not None else None


def _pk(scope: Scope, key: str) -> sa.ColumnElement[bool]:
    return sa.and_(memory.c.scope == scope.kind, memory.c.scope_id == scope.id, memory.c.key == key)


def _entry(row: Any) -> Entry:
    return Entry(row.key, row.version, _decode(row.value), bool(row.deleted), row.writer, row.ts)


class Blackboard:
    """Reads and writes of the blackboard in the catalog's database."""

    def __init__(self, engine: sa.Engine, redact: Callable[[str], str] = lambda s: s) -> None:
        self.engine = engine
        self.redact = redact

    # -- reads --------------------------------------------------------------------------

    def get(self, scope: Scope, key: str) -> Entry | None:
        """The key's current version (a deleted key's tombstone too), or None."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(memory, memory.c.updated_at.label("ts")).where(_pk(scope, key))
            ).first()
        return _entry(row) if row else None

    def list(self, scope: Scope, prefix: str = "") -> list[Entry]:
        """The live keys starting with `prefix`, by key."""
        query = (
            sa.select(memory, memory.c.updated_at.label("ts"))
            .where(memory.c.scope == scope.kind, memory.c.scope_id == scope.id)
            .where(memory.c.deleted.is_(False))
            .order_by(memory.c.key)
        )
        if prefix:
            query = query.where(memory.c.key.startswith(prefix, autoescape=True))
        with self.engine.connect() as conn:
            return [_entry(r) for r in conn.execute(query)]

    def history(self, scope: Scope, key: str) -> list[Entry]:
        """Every version the key had, oldest first."""
        h = memory_history
        query = (
            sa.select(h)
            .where(h.c.scope == scope.kind, h.c.scope_id == scope.id, h.c.key == key)
            .order_by(h.c.version)
        )
        with self.engine.connect() as conn:
            return [
                Entry(r.key, r.version, _decode(r.value), r.op == "delete", r.writer, r.ts, r.op)
                for r in conn.execute(query)
            ]

    def scopes(self) -> list[tuple[Scope, int]]:
        """Every scope that has keys, with how many live keys it holds."""
        query = (
            sa.select(memory.c.scope, memory.c.scope_id, sa.func.count())
            .where(memory.c.deleted.is_(False))
            .group_by(memory.c.scope, memory.c.scope_id)
            .order_by(memory.c.scope, memory.c.scope_id)
        )
        with self.engine.connect() as conn:
            return [(Scope(r[0], r[1]), int(r[2])) for r in conn.execute(query)]

    # -- writes -------------------------------------------------------------------------

    def set(
        self,
        scope: Scope,
        key: str,
        value: Any,
        *,
        writer: str,
        expected_version: int | None = None,
        write_id: str | None = None,
    ) -> WriteOutcome:
        """Write a new version; with `expected_version`, only over that version (0: the key
        has never been written)."""
        text = _encode(value, self.redact)
        key = check_key(key)
        return self._write(_Write(scope, key, "set", text, writer, expected_version, write_id))

    def delete(
        self,
        scope: Scope,
        key: str,
        *,
        writer: str,
        expected_version: int | None = None,
        write_id: str | None = None,
    ) -> WriteOutcome | None:
        """Delete the key (a new version, a tombstone); None when it holds nothing."""
        current = self.get(scope, check_key(key))
        if (current is None or current.deleted) and expected_version is None:
            return None
        return self._write(_Write(scope, key, "delete", None, writer, expected_version, write_id))

    def _write(self, w: _Write) -> WriteOutcome:
        for attempt in range(CREATE_ATTEMPTS + LOCKED_ATTEMPTS):
            try:
                with self.engine.begin() as conn:
                    outcome = self._write_once(conn, w)
            except IntegrityError:
                # Two writers created the key (or one repeated write_id landed) at once.
                if w.write_id is not None and (found := self._landed_as(w.scope, w.write_id)):
                    return WriteOutcome(True, found, repeated=True)
                if w.expected is not None:
                    return self._conflict(w.scope, w.key)
                if attempt < CREATE_ATTEMPTS:
                    continue
                raise
            except OperationalError as exc:
                if ("locked" in str(exc) or "busy" in str(exc)) and attempt < LOCKED_ATTEMPTS:
                    time.sleep(0.01 * (attempt + 1))
                    continue
                raise
            if outcome is None:
                return self._conflict(w.scope, w.key)
            return outcome
        raise RuntimeError(f"could not write {w.key} to the blackboard of {w.scope}")

    def _write_once(self, conn: sa.Connection, w: _Write) -> WriteOutcome | None:
        """One try in one transaction: the outcome, or None for a conflict."""
        scope, key = w.scope, w.key
        if w.write_id is not None:
            found = self._landed_as(scope, w.write_id, conn)
            if found:
                return WriteOutcome(True, found, repeated=True)
        now = time.time()
        values = {
            "value": w.text,
            "deleted": w.op == "delete",
            "writer": w.writer,
            "updated_at": now,
        }
        where = _pk(scope, key)
        if w.expected is not None:
            where = sa.and_(where, memory.c.version == w.expected)
        row = conn.execute(
            memory.update()
            .where(where)
            .values(version=memory.c.version + 1, **values)
            .returning(memory.c.version)
        ).first()
        if row is not None:
            version = int(row[0])
        elif w.expected in (None, 0):
            # A new key. A writer that raced us to it makes this insert fail: the caller
            # tries again (a blind write) or reports the conflict (expected 0).
            conn.execute(
                memory.insert().values(
                    scope=scope.kind, scope_id=scope.id, key=key, version=1, **values
                )
            )
            version = 1
        else:
            return None
        conn.execute(
            memory_history.insert().values(
                scope=scope.kind,
                scope_id=scope.id,
                key=key,
                version=version,
                op=w.op,
                value=w.text,
                writer=w.writer,
                write_id=w.write_id,
                ts=now,
            )
        )
        return WriteOutcome(True, version)

    def _landed_as(self, scope: Scope, write_id: str, conn: sa.Connection | None = None) -> int:
        """The version a write_id landed as, or 0."""
        h = memory_history
        query = sa.select(h.c.version).where(
            h.c.scope == scope.kind, h.c.scope_id == scope.id, h.c.write_id == write_id
        )
        if conn is not None:
            found = conn.execute(query).scalar()
        else:
            with self.engine.connect() as fresh:
                found = fresh.execute(query).scalar()
        return int(found or 0)

    def _conflict(self, scope: Scope, key: str) -> WriteOutcome:
        current = self.get(scope, key)
        return WriteOutcome(False, current.version if current else 0, current)
