"""The session catalog: one `Catalog` over every family of tables (sessions and runs, the
inbox, the transcript, artifacts, hand-overs, usage, workspaces), each in a module of its own."""

from __future__ import annotations

import time

from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from swarmdeck.catalog import migrations
from swarmdeck.catalog.access import Redact, WriteWouldWait, identity
from swarmdeck.catalog.artifacts import ArtifactTables
from swarmdeck.catalog.db import create_db_engine, is_store_failure, store_error
from swarmdeck.catalog.direct import MAIL_CHANNEL
from swarmdeck.catalog.handovers import HANDOVER_CHANNEL, HandoverTables
from swarmdeck.catalog.runs import RunTables
from swarmdeck.catalog.sessions import SessionTables
from swarmdeck.catalog.usage import UsageTables
from swarmdeck.catalog.workspaces import WorkspaceTables

# Callers that write without waiting, and workers that listen for hand-overs, import these
# from here as they did before the catalog was split.
__all__ = ["HANDOVER_CHANNEL", "MAIL_CHANNEL", "Catalog", "WriteWouldWait"]


class Catalog(
    SessionTables, RunTables, HandoverTables, ArtifactTables, UsageTables, WorkspaceTables
):
    """All catalog reads and writes; every persisted text passes the redaction filter."""

    @classmethod
    def open(cls, store_url: str, redact: Redact = identity) -> Catalog:
        """Connect to the store and create the catalog tables if they are missing.

        A store that cannot be used (corrupt, a directory, read-only, unreachable) is a
        StoreError saying what to do; this is where every command opens it.
        """
        try:
            engine = create_db_engine(store_url)
            for attempt in range(5):
                try:
                    migrations.create_all(engine)
                    break
                except (IntegrityError, ProgrammingError, OperationalError):
                    # Two processes creating tables at once: the loser retries and finds them.
                    if attempt == 4:
                        raise
                    time.sleep(0.1 * (attempt + 1))
        except Exception as exc:
            if is_store_failure(exc):
                raise store_error(store_url, exc) from exc
            raise
        return cls(engine, redact)
