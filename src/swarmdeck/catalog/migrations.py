"""Bring a store's catalog tables up to the schema: create the missing ones, add the
columns an existing one lacks.

`metadata.create_all` creates missing tables but never alters one, so a store created by
an earlier release would lack a column added since (and every query naming it would fail).
New columns are therefore nullable or carry a server default, and are added here, by one
query for what exists and one ALTER TABLE per missing column. Safe when several processes
open the store at once: a column another process added meanwhile is not an error.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from swarmdeck.catalog import blackboard, workspaces  # noqa: F401  (their tables join `metadata`)
from swarmdeck.catalog.schema import metadata

PREFIX = "sd_"


def create_all(engine: sa.Engine) -> None:
    """Create missing tables and add missing columns (idempotent; safe when several
    processes start at once)."""
    metadata.create_all(engine, checkfirst=True)
    add_missing_columns(engine)


def add_missing_columns(engine: sa.Engine) -> list[str]:
    """Add every column of the catalog's tables that the store lacks; returns them as
    `table.column`."""
    existing = _columns(engine)
    added = []
    for table in metadata.sorted_tables:
        have = existing.get(table.name)
        if not have:
            continue  # just created by create_all, or not ours
        for column in table.columns:
            if column.name in have:
                continue
            _add(engine, table, column)
            added.append(f"{table.name}.{column.name}")
            # A column declared with index=True is looked up by it (sd_sessions.executor).
            for index in table.indexes:
                if column.name in index.columns:
                    _index(engine, index)
    return added


def _columns(engine: sa.Engine) -> dict[str, set[str]]:
    """The columns of the store's catalog tables, in one query."""
    if engine.dialect.name == "sqlite":
        query = sa.text(
            "SELECT m.name, p.name FROM sqlite_master AS m, pragma_table_info(m.name) AS p "
            "WHERE m.type = 'table' AND m.name LIKE :prefix"
        )
    else:
        query = sa.text(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name LIKE :prefix"
        )
    found: dict[str, set[str]] = {}
    with engine.connect() as conn:
        for table, column in conn.execute(query, {"prefix": PREFIX + "%"}):
            found.setdefault(table, set()).add(column)
    return found


def _add(engine: sa.Engine, table: sa.Table, column: sa.Column) -> None:
    """ALTER TABLE ... ADD COLUMN, tolerating a concurrent process that added it first."""
    assert column.nullable or column.server_default is not None, (
        f"{table.name}.{column.name}: a column added to an existing table needs a server "
        "default or must be nullable"
    )
    spec = sa.schema.CreateColumn(column).compile(dialect=engine.dialect)
    guard = "" if engine.dialect.name == "sqlite" else "IF NOT EXISTS "
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {guard}{spec}")
    except (OperationalError, ProgrammingError, IntegrityError) as exc:
        if not _raced(exc, "duplicate column"):
            raise


def _index(engine: sa.Engine, index: sa.Index) -> None:
    """CREATE INDEX, tolerating a concurrent process that created it first."""
    try:
        index.create(engine, checkfirst=True)
    except (OperationalError, ProgrammingError, IntegrityError) as exc:
        if not _raced(exc, "already exists"):
            raise


def _raced(exc: Exception, message: str) -> bool:
    """Whether the error says another process made the same change first.

    PostgreSQL's IF NOT EXISTS checks before it writes its own catalog, so two sessions
    racing past the check collide on that catalog's unique index instead."""
    text = str(exc).lower()
    return (
        message in text
        or "pg_class_relname_nsp_index" in text
        or "pg_attribute_relid_attnam_index" in text
    )
