"""The workspace tables (workspaces.py) over the bare driver, for the fleet path of
`dispatch` and `run`: capture a workdir at submission and deliver its changes at the end
without SQLAlchemy. The statements are those of WorkspaceTables; tests run both."""

from __future__ import annotations

import json
import time
from typing import Any


class DirectWorkspaceTables:
    """sd_ws_packs, sd_ws_commits and sd_ws_refs over DirectCatalog's connection."""

    def _rows(self, text: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError  # DirectCatalog's

    def _write(self, statements: list[tuple[str, dict[str, Any]]]) -> None:
        raise NotImplementedError  # DirectCatalog's

    def known_commits(self, commit_ids: list[str]) -> set[str]:
        """Which of these commits the store holds."""
        if not commit_ids:
            return set()
        names = {f"c{n}": commit for n, commit in enumerate(commit_ids)}
        marks = ", ".join(f":{name}" for name in names)
        rows = self._rows(
            f"SELECT commit_id FROM sd_ws_commits WHERE commit_id IN ({marks})", names
        )
        return {row["commit_id"] for row in rows}

    def put_pack(self, pack_id: str, data: bytes, commit_id: str, bases: list[str]) -> bool:
        """Store a pack (unless held) and the commit it brings; False if that was stored."""
        if self.known_commits([commit_id]):
            return False
        now = time.time()
        pack = {"p": pack_id, "d": data, "s": len(data), "t": now}
        commit = {"c": commit_id, "p": pack_id, "b": json.dumps(bases), "t": now}
        self._write(
            [
                (
                    "INSERT INTO sd_ws_packs (pack_id, data, size, created_at) "
                    "VALUES (:p, :d, :s, :t) ON CONFLICT DO NOTHING",
                    pack,
                ),
                (
                    "INSERT INTO sd_ws_commits (commit_id, pack_id, bases, created_at) "
                    "VALUES (:c, :p, :b, :t) ON CONFLICT DO NOTHING",
                    commit,
                ),
            ]
        )
        return True

    def pack_of(self, commit_id: str) -> tuple[str, list[str]] | None:
        """The pack that brought a commit and the bases it left out, or None."""
        rows = self._rows(
            "SELECT pack_id, bases FROM sd_ws_commits WHERE commit_id = :c", {"c": commit_id}
        )
        return (rows[0]["pack_id"], json.loads(rows[0]["bases"])) if rows else None

    def pack_data(self, pack_id: str) -> bytes | None:
        """A pack's bytes, or None."""
        rows = self._rows("SELECT data FROM sd_ws_packs WHERE pack_id = :p", {"p": pack_id})
        return bytes(rows[0]["data"]) if rows else None

    def put_ref(self, workspace_id: str, step_key: str, commit_id: str) -> str:
        """Record a step's commit; the one recorded first is returned."""
        params = {"w": workspace_id, "k": step_key, "c": commit_id, "t": time.time()}
        self._write(
            [
                (
                    "INSERT INTO sd_ws_refs (workspace_id, step_key, commit_id, created_at) "
                    "VALUES (:w, :k, :c, :t) ON CONFLICT DO NOTHING",
                    params,
                )
            ]
        )
        found = self.ref(workspace_id, step_key)
        assert found is not None
        return found

    def ref(self, workspace_id: str, step_key: str) -> str | None:
        """The commit recorded for one step, or None."""
        rows = self._rows(
            "SELECT commit_id FROM sd_ws_refs WHERE workspace_id = :w AND step_key = :k",
            {"w": workspace_id, "k": step_key},
        )
        return rows[0]["commit_id"] if rows else None

    def latest_ref(self, workspace_id: str) -> str | None:
        """The workspace's newest commit, or None."""
        rows = self._rows(
            "SELECT commit_id FROM sd_ws_refs WHERE workspace_id = :w ORDER BY seq DESC LIMIT 1",
            {"w": workspace_id},
        )
        return rows[0]["commit_id"] if rows else None
