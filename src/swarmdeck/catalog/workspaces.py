"""Session workspaces kept in the store: git packs under their content hash, the commit
each pack brings, and each workspace's refs (one commit per journaled step).

The git side (capture, restore) lives in swarmdeck.workspace.snapshots; these tables only
keep bytes and names, so a host that shares nothing but the store can rebuild the files.
"""

from __future__ import annotations

import json
import time

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from swarmdeck.catalog.access import StoreAccess, lock_session
from swarmdeck.catalog.schema import metadata

# One git pack (`git pack-objects --stdout`), named by the sha256 of its bytes: the same
# objects sent twice are stored once.
ws_packs = sa.Table(
    "sd_ws_packs",
    metadata,
    sa.Column("pack_id", sa.String(64), primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

# The pack that brought a commit, and the commits whose objects that pack left out (they
# were in the store already): a restore fetches the packs of the commit and, recursively,
# of its bases.
ws_commits = sa.Table(
    "sd_ws_commits",
    metadata,
    sa.Column("commit_id", sa.String(64), primary_key=True),
    sa.Column("pack_id", sa.String(64), nullable=False),
    sa.Column("bases", sa.Text, nullable=False, default="[]"),  # JSON list of commit ids
    sa.Column("created_at", sa.Float, nullable=False),
)

# A workspace's history: the commit its files were at after each journaled step. The key
# is the step's journal key, so a step run again finds the snapshot it already recorded.
ws_refs = sa.Table(
    "sd_ws_refs",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("workspace_id", sa.String(64), nullable=False, index=True),
    sa.Column("step_key", sa.String(200), nullable=False),
    sa.Column("commit_id", sa.String(64), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.UniqueConstraint("workspace_id", "step_key", name="uq_sd_ws_ref_step"),
)


def delete_refs_of(conn: sa.Connection, workspace_ids: list[str]) -> None:
    """Remove these workspaces' refs, in `conn`'s transaction (a removed session's: its
    workspace has its id). Packs stay: a later snapshot of another workspace may build
    on them."""
    conn.execute(ws_refs.delete().where(ws_refs.c.workspace_id.in_(workspace_ids)))


class WorkspaceTables(StoreAccess):
    """Workspace packs, commits and refs (sd_ws_*); the PackStore of snapshots.py."""

    def known_commits(self, commit_ids: list[str]) -> set[str]:
        """Which of these commits the store holds (with every object they reach)."""
        if not commit_ids:
            return set()
        table = ws_commits
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(table.c.commit_id).where(table.c.commit_id.in_(commit_ids))
            )
            return {row[0] for row in rows}

    def put_pack(self, pack_id: str, data: bytes, commit_id: str, bases: list[str]) -> bool:
        """Store a pack (unless held already) and the commit it brings; False when the
        commit was stored before (nothing written)."""
        try:
            return self._put_pack(pack_id, data, commit_id, bases)
        except IntegrityError:
            return False  # another host stored the same commit (or pack) just now

    def _put_pack(self, pack_id: str, data: bytes, commit_id: str, bases: list[str]) -> bool:
        now = time.time()
        with self.engine.begin() as conn:
            if conn.execute(
                sa.select(ws_commits.c.commit_id).where(ws_commits.c.commit_id == commit_id)
            ).first():
                return False
            held = conn.execute(
                sa.select(ws_packs.c.pack_id).where(ws_packs.c.pack_id == pack_id)
            ).first()
            if held is None:
                conn.execute(
                    ws_packs.insert().values(
                        pack_id=pack_id, data=data, size=len(data), created_at=now
                    )
                )
            conn.execute(
                ws_commits.insert().values(
                    commit_id=commit_id, pack_id=pack_id, bases=json.dumps(bases), created_at=now
                )
            )
        return True

    def pack_of(self, commit_id: str) -> tuple[str, list[str]] | None:
        """The pack that brought a commit and the commits it left out, or None."""
        table = ws_commits
        with self._reads.connect() as conn:
            row = conn.execute(
                sa.select(table.c.pack_id, table.c.bases).where(table.c.commit_id == commit_id)
            ).first()
        return (row[0], json.loads(row[1])) if row else None

    def pack_data(self, pack_id: str) -> bytes | None:
        """A pack's bytes, or None."""
        with self._reads.connect() as conn:
            row = conn.execute(
                sa.select(ws_packs.c.data).where(ws_packs.c.pack_id == pack_id)
            ).first()
        return bytes(row[0]) if row else None

    def put_ref(self, workspace_id: str, step_key: str, commit_id: str) -> str:
        """Record the workspace's commit after a step; a step recorded before keeps its
        first commit, which is returned (the one the journal agrees with). Fenced when this
        execution of the session no longer holds it."""
        try:
            return self._put_ref(workspace_id, step_key, commit_id)
        except IntegrityError:
            # Two executions of one step raced (a takeover): the first to land wins.
            found = self.ref(workspace_id, step_key)
            if found is None:
                raise
            return found

    def _put_ref(self, workspace_id: str, step_key: str, commit_id: str) -> str:
        with self.engine.begin() as conn:
            # A session's workspace has its id: a snapshot taken by an execution that was
            # taken over meanwhile (a paused or cut-off host) lands nothing (Fenced).
            lock_session(conn, workspace_id)
            found = self._ref_in(conn, workspace_id, step_key)
            if found is not None:
                return found
            self._check_fence(conn, workspace_id)
            conn.execute(
                ws_refs.insert().values(
                    workspace_id=workspace_id,
                    step_key=step_key,
                    commit_id=commit_id,
                    created_at=time.time(),
                )
            )
        return commit_id

    def ref(self, workspace_id: str, step_key: str) -> str | None:
        """The commit recorded for one step, or None."""
        with self._reads.connect() as conn:
            return self._ref_in(conn, workspace_id, step_key)

    def latest_ref(self, workspace_id: str) -> str | None:
        """The workspace's newest commit (after its last recorded step), or None."""
        table = ws_refs
        with self._reads.connect() as conn:
            row = conn.execute(
                sa.select(table.c.commit_id)
                .where(table.c.workspace_id == workspace_id)
                .order_by(table.c.seq.desc())
                .limit(1)
            ).first()
        return row[0] if row else None

    def refs_of(self, workspace_id: str) -> list[tuple[str, str]]:
        """The workspace's (step key, commit) pairs, oldest first."""
        table = ws_refs
        with self._reads.connect() as conn:
            rows = conn.execute(
                sa.select(table.c.step_key, table.c.commit_id)
                .where(table.c.workspace_id == workspace_id)
                .order_by(table.c.seq)
            )
            return [(row[0], row[1]) for row in rows]

    @staticmethod
    def _ref_in(conn: sa.Connection, workspace_id: str, step_key: str) -> str | None:
        table = ws_refs
        row = conn.execute(
            sa.select(table.c.commit_id).where(
                table.c.workspace_id == workspace_id, table.c.step_key == step_key
            )
        ).first()
        return row[0] if row else None
