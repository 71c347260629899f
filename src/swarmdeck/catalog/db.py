"""One SQLAlchemy engine per store URL, tuned as DBOS-NOTES.md measured (WAL, NORMAL)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DatabaseError, OperationalError

from swarmdeck.errors import StoreError
from swarmdeck.filemodes import private_dir, private_file

WAL_SWITCH_SECONDS = 30.0
# How long a write waits for another process's lock before SQLite says "locked".
LOCK_WAIT_SECONDS = 30
# SQLite creates these beside the store, with the store file's mode.
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def sqlalchemy_url(store_url: str) -> str:
    """Map a store URL to the driver SQLAlchemy should use (psycopg 3 for PostgreSQL)."""
    for prefix in ("postgresql://", "postgres://"):
        if store_url.startswith(prefix):
            return "postgresql+psycopg://" + store_url[len(prefix) :]
    return store_url


def sqlite_path(store_url: str) -> Path | None:
    """The file behind a sqlite:/// URL, or None for other stores."""
    if not store_url.startswith("sqlite:///"):
        return None
    return Path(store_url[len("sqlite:///") :])


def create_db_engine(store_url: str, *, wait_for_locks: bool = True) -> sa.Engine:
    """An engine for the store; on SQLite the file is created in WAL mode first.

    With `wait_for_locks` False (SQLite only), a write finding the database locked fails at
    once instead of waiting, and commits never run a checkpoint: for writes made on the
    event loop, which must never wait (see Catalog.append_event).
    """
    url = sqlalchemy_url(store_url)
    path = sqlite_path(store_url)
    if path is None:
        return sa.create_engine(
            url,
            pool_size=10,
            max_overflow=20,
            # Pre-ping costs a round trip per checkout (~10 % per step, DBOS-NOTES.md).
            pool_pre_ping=False,
            connect_args={
                "application_name": "swarmdeck",
                # Fail fast when the server is unreachable instead of hanging (libpq waits).
                "connect_timeout": 10,
                # A frozen process must not keep a session's row lock: the server ends a
                # transaction left idle for a minute (DBOS sets the same on its own engine).
                "options": "-c idle_in_transaction_session_timeout=60000",
            },
        )
    _private_store_file(path)
    # LIFO: the connection used last is used next, its page cache still warm; round-robin
    # over the pool re-read pages on every statement (0.34 ms an append instead of 0.23).
    engine = sa.create_engine(url, pool_size=20, max_overflow=20, pool_use_lifo=True)
    busy_timeout_ms = LOCK_WAIT_SECONDS * 1000 if wait_for_locks else 0

    @event.listens_for(engine, "connect")
    def _tune(dbapi_conn: Any, _record: Any) -> None:
        # Same hook DBOS installs on its own SQLite engine (IMMEDIATE writers, long busy
        # timeout), plus NORMAL sync, which WAL makes crash-safe for a process crash.
        dbapi_conn.isolation_level = "IMMEDIATE"
        dbapi_conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        dbapi_conn.execute("PRAGMA foreign_keys=ON")
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")
        if not wait_for_locks:
            # A checkpoint copies pages and syncs the file; the waiting engine's commits
            # (and DBOS's) run them instead.
            dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")

    @event.listens_for(engine, "handle_error")
    def _read_only(context: Any) -> StoreError | None:
        # A store whose -wal and -shm a crashed (or os._exit) process left behind opens
        # read-only in a read-only home, so the refusal comes at the first write.
        if "readonly database" in str(context.original_exception):
            return store_error(store_url, context.original_exception)
        return None

    _switch_to_wal(engine)
    return engine


def read_engine(engine: sa.Engine) -> sa.Engine:
    """The engine for reads: outside a transaction on PostgreSQL, where READ COMMITTED gives
    each statement its own snapshot anyway, and the BEGIN and the COMMIT or ROLLBACK around
    a read are two more network round trips (a read measured 1.0 ms, then 0.7). SQLite's
    driver opens no transaction for a read."""
    if engine.dialect.name == "sqlite":
        return engine
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def _private_store_file(path: Path) -> None:
    """The store and its side files 0600 from creation (SQLite gives the -wal and -shm it
    creates the store's mode); an existing looser one is tightened."""
    if not path.parent.exists():
        private_dir(path.parent)
    private_file(path)
    for suffix in SQLITE_SIDE_FILES:
        side = path.with_name(path.name + suffix)
        if side.exists():
            private_file(side)


def _switch_to_wal(engine: sa.Engine) -> None:
    """Put the file in WAL mode (it stays so), retrying while other processes hold it.

    Several processes opening a fresh store at once race to change the journal mode, and
    SQLite answers the loser "database is locked" at once, without its busy timeout.
    """
    deadline = time.monotonic() + WAL_SWITCH_SECONDS
    delay = 0.01
    while True:
        try:
            with engine.connect() as conn:
                mode = conn.exec_driver_sql("PRAGMA journal_mode=WAL").scalar()
            if str(mode).lower() == "wal" or time.monotonic() > deadline:
                return
        except OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


# How to fix a store that cannot be opened; the store is never moved or rewritten for you.
_STORE_HINT = "point SWARMDECK_STORE or SWARMDECK_HOME at a usable store"


def shown_url(store_url: str) -> str:
    """The store URL for a message: the password masked, the query (which may hold one
    too) left out."""
    try:
        return make_url(store_url).set(query={}).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: show its scheme only
        return store_url.split("://", 1)[0] + "://…"


def store_error(store_url: str, exc: BaseException) -> StoreError:
    """A one-line StoreError for a store that failed to open, saying what to do."""
    detail = " ".join(str(getattr(exc, "orig", None) or exc).split())
    path = sqlite_path(store_url)
    if path is None:
        for secret in _secrets_of(store_url):  # a driver may echo what it was given
            detail = detail.replace(secret, "***")
        return StoreError(
            f"cannot open the store {shown_url(store_url)}: {detail[:200]}",
            "is the server up and the URL right? check SWARMDECK_STORE",
        )
    if path.is_dir():
        return StoreError(f"the store {path} is a directory, not a SQLite file", _STORE_HINT)
    if isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StoreError(
            f"the store {path} cannot be written: {exc.strerror}",
            "make SWARMDECK_HOME writable, or set it to a writable directory",
        )
    if isinstance(exc, OSError):
        return StoreError(f"cannot create the store {path}: {exc.strerror or detail}", _STORE_HINT)
    if "not a database" in detail:
        return StoreError(
            f"the store {path} is not a SQLite database (corrupt, or another file)",
            f"move it away to start a fresh store, or {_STORE_HINT}",
        )
    readonly = "readonly" in detail or "read-only" in detail
    if readonly or not os.access(path.parent, os.W_OK):
        return StoreError(
            f"the store {path} cannot be written: {path.parent} is read-only",
            "make SWARMDECK_HOME writable, or set it to a writable directory",
        )
    return StoreError(f"cannot open the store {path}: {detail[:200]}", _STORE_HINT)


def locked_store_error(exc: BaseException, store_url: str) -> StoreError | None:
    """A one-line StoreError when SQLite's busy wait ran out ("database is locked"):
    another process kept the store's write lock, as a stopped or hung worker does; None
    for any other error."""
    path = sqlite_path(store_url) or store_url
    seen: BaseException | None = exc
    while seen is not None:
        if "database is locked" in str(seen):
            return StoreError(
                f"the store {path} stayed locked for {LOCK_WAIT_SECONDS} s: another "
                "process holds its write lock (a stopped or hung swarmdeck worker?)",
                f"`fuser -v {path}` lists the processes that have it open; resume "
                "(kill -CONT) or stop the one that hangs, then run this again",
            )
        seen = seen.__cause__ or seen.__context__
    return None


def _secrets_of(store_url: str) -> list[str]:
    try:
        url = make_url(store_url)
    except Exception:
        return []
    found = [str(url.password)] if url.password else []
    found += [str(v) for k, v in url.query.items() if "pass" in k.lower() and v]
    return [s for s in found if len(s) >= 3]


def is_store_failure(exc: BaseException) -> bool:
    """True for what opening a store raises when the store itself is unusable (not a bug of
    ours: a ProgrammingError or IntegrityError is not one)."""
    if isinstance(exc, OSError | OperationalError):
        return True
    return type(exc) is DatabaseError
