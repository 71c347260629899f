"""Store-wide reads and purges for the maintenance tools: light session rows, footprints,
table statistics, transcript purges."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.db import sqlite_path
from swarmdeck.catalog.records import SYSTEM_SESSION_PREFIX, TERMINAL_STATUSES

# Transcript entries a purge keeps: what the session was asked, and how it ended.
KEPT_KINDS = ("task", "status")
_s, _e = schema.sessions, schema.events


@dataclass(frozen=True)
class SessionBrief:
    """The columns of a session the sweeper decides on."""

    id: str
    parent_id: str | None
    root_id: str
    status: str
    updated_at: float
    system: bool
    generation: int
    run_dir: str

    @property
    def terminal(self) -> bool:
        """True once the session has ended."""
        return self.status in TERMINAL_STATUSES


def session_briefs(catalog: Catalog) -> list[SessionBrief]:
    """Every session, light."""
    q = sa.select(
        _s.c.id,
        _s.c.parent_id,
        _s.c.root_id,
        _s.c.status,
        _s.c.updated_at,
        _s.c.options,
        _s.c.generation,
        _s.c.run_dir,
    )
    with catalog.engine.connect() as conn:
        rows = conn.execute(q).all()
    return [
        SessionBrief(
            r.id,
            r.parent_id,
            r.root_id,
            r.status,
            r.updated_at,
            r.id.startswith(SYSTEM_SESSION_PREFIX)
            or bool(json.loads(r.options or "{}").get("system_agent")),
            r.generation,
            r.run_dir,
        )
        for r in rows
    ]


def transcript_footprint(catalog: Catalog, session_ids: list[str]) -> tuple[int, int]:
    """(rows, bytes) of these sessions' transcripts."""
    if not session_ids:
        return 0, 0
    q = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(sa.func.length(_e.c.payload)), 0))
    with catalog.engine.connect() as conn:
        rows, size = conn.execute(q.where(_e.c.session_id.in_(session_ids))).one()
    return int(rows), int(size)


def purge_transcripts(catalog: Catalog, session_ids: list[str]) -> tuple[int, int]:
    """Delete these sessions' transcripts except their task and end; (rows, bytes) removed."""
    if not session_ids:
        return 0, 0
    where = sa.and_(_e.c.session_id.in_(session_ids), _e.c.kind.not_in(KEPT_KINDS))
    q = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(sa.func.length(_e.c.payload)), 0))
    with catalog.engine.begin() as conn:
        rows, size = conn.execute(q.where(where)).one()
        conn.execute(_e.delete().where(where))
        for table in (schema.tool_marks, schema.generations):
            conn.execute(table.delete().where(table.c.session_id.in_(session_ids)))
    return int(rows), int(size)


def purge_consumed_inbox(catalog: Catalog, before: float) -> tuple[int, int]:
    """Delete inbox messages taken before a time (they are in the transcripts);
    (rows, bytes) removed.

    Kept: those a live session's loop took in its current generation. Such a drain's claim
    is its only record (workflow format 6), and a replay of the generation after a crash
    reads it back to take the path its first run took.
    """
    inbox = schema.inbox
    where = sa.and_(
        inbox.c.consumed_by.is_not(None),
        inbox.c.created_at < before,
        ~_replayable_claim(inbox).exists(),
    )
    q = sa.select(
        sa.func.count(), sa.func.coalesce(sa.func.sum(sa.func.length(inbox.c.payload)), 0)
    )
    with catalog.engine.begin() as conn:
        rows, size = conn.execute(q.where(where)).one()
        conn.execute(inbox.delete().where(where))
    return int(rows), int(size)


def _replayable_claim(inbox: sa.Table) -> sa.Select[tuple[str]]:
    """The session of an inbox row, when the row's claim is a drain of the session's current
    generation (`g<generation>:d<n>`, session.SessionLoop.drain) and the session lives."""
    s = schema.sessions.c
    drain_claims = sa.literal("g") + sa.cast(s.generation, sa.String) + ":d%"
    return sa.select(s.id).where(
        s.id == inbox.c.session_id,
        inbox.c.consumed_by.like(drain_claims),
        s.status.not_in(sorted(TERMINAL_STATUSES)),
    )


def forget_generations(catalog: Catalog, pairs: Iterable[tuple[str, int]]) -> int:
    """Drop the start records of generations whose workflows are gone; rows removed."""
    g = schema.generations
    removed = 0
    with catalog.engine.begin() as conn:
        for session_id, generation in pairs:
            removed += conn.execute(
                g.delete().where(g.c.session_id == session_id, g.c.generation == generation)
            ).rowcount
    return removed


def artifact_paths(catalog: Catalog) -> set[str]:
    """The file of every artifact the catalog knows."""
    with catalog.engine.connect() as conn:
        return {r[0] for r in conn.execute(sa.select(schema.artifacts.c.path))}


def _tables(conn: sa.Connection) -> list[tuple[str | None, str]]:
    inspector = sa.inspect(conn)
    found: list[tuple[str | None, str]] = [(None, t) for t in inspector.get_table_names()]
    if conn.dialect.name == "postgresql" and "dbos" in inspector.get_schema_names():
        found += [("dbos", t) for t in inspector.get_table_names(schema="dbos")]
    return found


def table_stats(catalog: Catalog) -> list[dict[str, Any]]:
    """Rows and bytes of every table of the store (the catalog's and the engine's)."""
    out: list[dict[str, Any]] = []
    with catalog.engine.connect() as conn:
        sizes = _sqlite_table_bytes(conn) if catalog.is_sqlite else {}
        for schema_name, table in _tables(conn):
            qualified = f'"{schema_name}"."{table}"' if schema_name else f'"{table}"'
            rows = conn.exec_driver_sql(f"SELECT COUNT(*) FROM {qualified}").scalar_one()
            if catalog.is_sqlite:
                size = sizes.get(table)
            else:
                size = conn.exec_driver_sql(
                    "SELECT pg_total_relation_size(CAST(%(t)s AS regclass))", {"t": qualified}
                ).scalar_one()
            name = f"{schema_name}.{table}" if schema_name else table
            out.append({"table": name, "rows": int(rows), "bytes": size})
    return sorted(out, key=lambda r: r["table"])


def _sqlite_table_bytes(conn: sa.Connection) -> dict[str, int]:
    """Bytes per table with their indexes, from the dbstat table (when compiled in)."""
    try:
        rows = conn.exec_driver_sql(
            "SELECT m.tbl_name, SUM(d.pgsize) FROM dbstat d JOIN sqlite_master m "
            "ON d.name = m.name GROUP BY m.tbl_name"
        ).all()
    except sa.exc.OperationalError:
        return {}
    return {r[0]: int(r[1]) for r in rows}


def database_size(catalog: Catalog) -> dict[str, Any]:
    """The store's size: file and WAL on SQLite; database and connections on PostgreSQL."""
    with catalog.engine.connect() as conn:
        if catalog.is_sqlite:
            path = sqlite_path(str(catalog.engine.url))
            wal = Path(f"{path}-wal") if path else None
            return {
                "kind": "sqlite",
                "bytes": path.stat().st_size if path and path.exists() else None,
                "wal_bytes": wal.stat().st_size if wal and wal.exists() else 0,
            }
        size = conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar_one()
        connections = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
        ).scalar_one()
        return {"kind": "postgresql", "bytes": int(size), "connections": int(connections)}


def compact(catalog: Catalog) -> None:
    """VACUUM (SQLite, then a WAL truncation) or VACUUM ANALYZE of every table (PostgreSQL)."""
    with catalog.engine.connect() as conn:
        auto = conn.execution_options(isolation_level="AUTOCOMMIT")
        if catalog.is_sqlite:
            auto.exec_driver_sql("VACUUM")
            auto.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            return
        for schema_name, table in _tables(conn):
            qualified = f'"{schema_name}"."{table}"' if schema_name else f'"{table}"'
            auto.exec_driver_sql(f"VACUUM ANALYZE {qualified}")
