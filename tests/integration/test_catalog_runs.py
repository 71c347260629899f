"""A session's run starts on both stores: the claim and the generation's start in one
commit when nothing changed between the read and the claim; the claim alone when something
did; nothing at all when another execution stored the start first."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from swarmdeck.catalog.catalog import Catalog
from tests.conftest import Store
from tests.integration.test_catalog_support import new_session


@pytest.fixture
def runs(store: Store) -> Iterator[Catalog]:
    """A catalog on a fresh store; its engine is closed after the test."""
    cat = Catalog.open(store.url)
    yield cat
    cat.engine.dispose()


def test_a_run_start_reads_the_session_and_its_kept_start_at_once(runs: Catalog) -> None:
    new_session(runs, "s")
    before, stored = runs.run_start("s", 0)
    assert (before.id, before.status, stored) == ("s", "pending", None)
    runs.keep_generation_start("s", 0, {"turns_done": 0})
    assert runs.run_start("s", 0)[1] == {"turns_done": 0}
    assert runs.run_start("s", 1)[1] is None


def test_the_claim_keeps_the_start_made_before_it_in_one_commit(runs: Catalog) -> None:
    new_session(runs, "s")
    before, _ = runs.run_start("s", 0)
    commits: list[int] = []

    def count(_conn: sa.Connection) -> None:
        commits.append(1)

    sa.event.listen(runs.engine, "commit", count)
    try:
        opened = runs.open_run_keeping("s", "ex-1", 0, {"turns_done": 0}, lambda r, t: True)
    finally:
        sa.event.remove(runs.engine, "commit", count)
    assert opened is not None
    record, turns, kept = opened
    assert (record.status, record.executor, record.epoch, turns) == (
        "running",
        "ex-1",
        before.epoch + 1,
        0,
    )
    assert kept == {"turns_done": 0} and len(commits) == 1
    assert runs.generation_start("s", 0) == {"turns_done": 0}


def test_a_start_the_claim_does_not_bear_out_is_left_to_the_caller(runs: Catalog) -> None:
    new_session(runs, "s")
    seen: list[tuple[str, int]] = []

    def holds(record, turns):  # type: ignore[no-untyped-def]
        seen.append((record.status, turns))
        return False

    opened = runs.open_run_keeping("s", "ex-1", 0, {"turns_done": 7}, holds)
    assert opened is not None
    record, _turns, kept = opened
    # Asked about the session as claimed; the claim stands, the start is not stored.
    assert seen == [("running", 0)] and kept is None
    assert runs.get_session("s").epoch == record.epoch == 1
    assert runs.generation_start("s", 0) is None


def test_a_start_stored_first_by_another_execution_leaves_everything_as_it_was(
    runs: Catalog,
) -> None:
    new_session(runs, "s")
    runs.open_run("s", "ex-1")
    runs.keep_generation_start("s", 0, {"turns_done": 0})
    assert runs.open_run_keeping("s", "ex-2", 0, {"turns_done": 9}, lambda r, t: True) is None
    # Not even the claim: the caller reruns the stored start under a claim of its own.
    record = runs.get_session("s")
    assert (record.executor, record.epoch) == ("ex-1", 1)
    assert runs.generation_start("s", 0) == {"turns_done": 0}
