"""The blackboard's tables: versioned keys per scope, and every version each key had.

The semantics (compare-and-set, scopes, idempotent writes) live in swarmdeck.memory; the
catalog owns the tables so they are created, and removed with a session tree, like the rest.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from swarmdeck.catalog.schema import metadata

# The current version of each key. A deleted key keeps its row (a tombstone), so its
# version keeps counting and a compare-and-set against the delete still works.
memory = sa.Table(
    "sd_memory",
    metadata,
    sa.Column("scope", sa.String(16), primary_key=True),  # swarm, tree or store
    sa.Column("scope_id", sa.String(64), primary_key=True),  # a session id, or "*"
    sa.Column("key", sa.String(256), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("value", sa.Text),  # JSON; null once deleted
    sa.Column("deleted", sa.Boolean, nullable=False, default=False),
    sa.Column("writer", sa.String(128), nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

# One row per version that landed: nothing a writer was told had landed is ever missing.
# `write_id` makes a write idempotent: a tool call run again after a crash finds its row.
memory_history = sa.Table(
    "sd_memory_history",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("scope", sa.String(16), nullable=False),
    sa.Column("scope_id", sa.String(64), nullable=False),
    sa.Column("key", sa.String(256), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("op", sa.String(8), nullable=False),  # set or delete
    sa.Column("value", sa.Text),
    sa.Column("writer", sa.String(128), nullable=False),
    sa.Column("write_id", sa.String(256)),
    sa.Column("ts", sa.Float, nullable=False),
    sa.UniqueConstraint("scope", "scope_id", "key", "version", name="uq_sd_memory_version"),
    sa.UniqueConstraint("scope", "scope_id", "write_id", name="uq_sd_memory_write"),
)

# Scopes whose id is a session's: they go when that session's tree is removed.
SESSION_SCOPES = ("swarm", "tree")


def delete_scopes_of(conn: sa.Connection, session_ids: Iterable[str]) -> None:
    """Remove the blackboards of these sessions (as a swarm or a tree), in `conn`'s
    transaction."""
    ids = list(session_ids)
    for table in (memory, memory_history):
        conn.execute(
            table.delete().where(table.c.scope.in_(SESSION_SCOPES), table.c.scope_id.in_(ids))
        )
