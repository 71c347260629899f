"""The catalog: one object over the table families (sessions, runs and hand-overs, inbox,
events, usage, artifacts), each in a module of its own; callers need only this one."""

from __future__ import annotations

import time

from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from swarmdeck.catalog import migrations
from swarmdeck.catalog.artifact_rows import ArtifactRows
from swarmdeck.catalog.db import create_db_engine, is_store_failure, store_error
from swarmdeck.catalog.event_rows import EventRows
from swarmdeck.catalog.handovers import HANDOVER_CHANNEL, Handovers
from swarmdeck.catalog.inbox_rows import InboxRows
from swarmdeck.catalog.session_rows import SessionRows
from swarmdeck.catalog.store_base import Redact, WriteWouldWait, identity
from swarmdeck.catalog.usage_rows import UsageRows

__all__ = ["HANDOVER_CHANNEL", "Catalog", "WriteWouldWait"]


class Catalog(SessionRows, Handovers, InboxRows, EventRows, UsageRows, ArtifactRows):
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
