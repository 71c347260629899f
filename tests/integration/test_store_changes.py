"""StoreChanges: a SQLite store's polls skip their queries until another connection commits."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from swarmdeck.catalog.changes import StoreChanges


def test_each_poll_sees_a_commit_of_another_connection_once(tmp_path: Path) -> None:
    path = str(tmp_path / "store.sqlite")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA journal_mode=WAL")
    other.execute("CREATE TABLE t (x INTEGER)")
    changes = StoreChanges(path)
    try:
        assert changes.changed("handovers") and changes.changed("mail")  # first looks poll
        assert not changes.changed("handovers") and not changes.changed("mail")
        other.execute("SELECT * FROM t").fetchall()  # a read is no change
        assert not changes.changed("handovers")
        other.execute("INSERT INTO t VALUES (1)")
        assert changes.changed("handovers")
        assert not changes.changed("handovers")
        assert changes.changed("mail")  # each poll keeps its own place
        other.execute("BEGIN")
        other.execute("INSERT INTO t VALUES (2)")
        assert not changes.changed("handovers"), "not committed yet"
        other.execute("COMMIT")
        assert changes.changed("handovers")
        changes.forget("handovers")  # a failed poll looks again
        assert changes.changed("handovers")
    finally:
        changes.close()
        other.close()


def test_an_unreadable_store_means_poll(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    sqlite3.connect(path).close()
    changes = StoreChanges(str(path))
    assert changes.changed("handovers")
    changes.close()  # a closed connection cannot read the version: poll, do not skip
    assert changes.changed("handovers") and changes.changed("handovers")
