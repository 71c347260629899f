"""A store created by an earlier release lacks the columns added since: opening it adds
them (once, even when several processes open it at the same moment), on both stores."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import sqlalchemy as sa

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.db import create_db_engine
from swarmdeck.catalog.migrations import add_missing_columns
from swarmdeck.models.types import Usage
from tests.conftest import Store

ADDED = [
    "sd_sessions.active_at",
    "sd_sessions.executor",
    "sd_sessions.epoch",
    "sd_usage.estimated",
    "sd_workers.role",
]


def _drop_new_columns(catalog: Catalog) -> None:
    """Make the store look like one an earlier release created."""
    with catalog.engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE sd_sessions DROP COLUMN active_at")
        conn.exec_driver_sql("DROP INDEX ix_sd_sessions_executor")
        conn.exec_driver_sql("ALTER TABLE sd_sessions DROP COLUMN executor")
        conn.exec_driver_sql("ALTER TABLE sd_sessions DROP COLUMN epoch")
        conn.exec_driver_sql("ALTER TABLE sd_usage DROP COLUMN estimated")
        conn.exec_driver_sql("ALTER TABLE sd_workers DROP COLUMN role")


def test_opening_an_older_store_adds_the_missing_columns(store: Store, sd_home: Path) -> None:
    catalog = Catalog.open(store.url)
    assert add_missing_columns(catalog.engine) == []  # a fresh store has them all
    catalog.create_session(
        session_id="old", model="m", mode="agent", workdir="/", run_dir="/", task="t"
    )
    catalog.record_usage("old", 0, "p", "m", Usage(input=3, output=4), None)
    _drop_new_columns(catalog)
    catalog.engine.dispose()

    def open_it(_: int) -> list[str]:
        engine = create_db_engine(store.url)  # one engine each, as separate processes have
        try:
            return add_missing_columns(engine)
        finally:
            engine.dispose()

    with ThreadPoolExecutor(4) as pool:  # several processes opening it at once
        added = list(pool.map(open_it, range(4)))
    assert {column for found in added for column in found} == set(ADDED)
    reopened = Catalog.open(store.url)
    assert add_missing_columns(reopened.engine) == []
    indexes = {i["name"] for i in sa.inspect(reopened.engine).get_indexes("sd_sessions")}
    assert "ix_sd_sessions_executor" in indexes  # the fleet claims by it
    record = reopened.get_session("old")
    assert record.active_at is None
    assert record.epoch == 0  # the server default fills the rows already there
    reopened.touch_active("old")
    assert reopened.get_session("old").active_at is not None
    totals = reopened.usage_totals(["old"])
    assert (totals.input, totals.output, totals.estimated_turns) == (3, 4, 0)  # the default
    reopened.record_usage("old", 1, "p", "m", Usage(input=1, output=1, estimated=True), None)
    assert reopened.usage_totals(["old"]).estimated_turns == 1
