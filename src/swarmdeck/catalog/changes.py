"""Whether a SQLite store changed since a poll last looked, for the cost of one pragma.

A worker polls the store many times a second for work handed over and mail (SQLite has no
NOTIFY). Most polls of an idle store find nothing; `PRAGMA data_version` on a connection
of its own changes whenever any other connection commits, so a poll can skip its queries
(and their thread hop) until something was written.
"""

from __future__ import annotations

import sqlite3
import threading


class StoreChanges:
    """Tells each named poll whether the store changed since that poll last looked."""

    def __init__(self, path: str) -> None:
        # A connection only this watch uses: its own commits would not count, and it makes
        # none. Autocommit, so no read transaction pins an old snapshot of the file.
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}

    def changed(self, poll: str) -> bool:
        """True when something was committed since `poll` last got True (and the first
        time). The version is read before the poll queries, so a commit racing the query
        is seen by the next look."""
        try:
            with self._lock:
                version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            return True  # when unsure, poll
        if self._seen.get(poll) == version:
            return False
        self._seen[poll] = version
        return True

    def forget(self, poll: str) -> None:
        """The poll failed: its next look polls again whatever was written."""
        self._seen.pop(poll, None)

    def close(self) -> None:
        """Close the watch's connection."""
        self._conn.close()
