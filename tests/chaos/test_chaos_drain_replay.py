"""A drain of workflow format 6 is no engine step: its claim in the inbox is its record. A
worker that replays a session after a SIGKILL must take the path the first run took, so a
drain that found nothing then finds nothing now, even if mail came since: the mail is for
the drain after it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck.config import load_settings
from swarmdeck.runtime.engine.workflow import ring_offline
from swarmdeck.runtime.host import Host
from tests.chaos.test_upgrade import CHAT, engine_steps
from tests.conftest import Store, write_provider
from tests.integration.test_fleet_support import Fleet
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    TurnLedger,
    open_catalog,
    text,
    wait_for,
)

pytestmark = [pytest.mark.chaos, pytest.mark.fleet]


def test_a_replayed_drain_that_found_nothing_takes_nothing(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted({"chat": Agent([text("hello"), text("answered")])})
    fake_llm.set_script(script)
    old = fleet.start("host-a")
    sid = Host().create_session(replace(CHAT, workdir=workdir), fleet=True).id
    catalog = open_catalog()
    wait_for(lambda: engine_steps(store, sid) == ["DBOS.sleep"], what="the session's rest")
    # A ring with no mail behind it: the drain it wakes (claim g0:d1) finds nothing, and
    # the session waits again, its next receive recorded past that drain.
    ring_offline(load_settings(), sid)
    again = ["DBOS.recv", "DBOS.sleep", "DBOS.sleep"]
    wait_for(lambda: engine_steps(store, sid) == again, what="the wait after the stale ring")
    ledger = TurnLedger(script, catalog, fake_llm)
    fleet.kill(old)
    ledger.killed()

    # Mail lands while nobody runs the session: a replay that drained live would take it
    # under g0:d1, the claim its first run found empty.
    assert catalog.post(sid, "m-1", "user", {"text": "a person asks"})
    new = fleet.start("host-b")
    wait_for(lambda: catalog.get_session(sid).executor == new.executor_id, timeout=60)
    ring_offline(load_settings(), sid)

    def answered_and_resting() -> bool:
        return (
            len(catalog.events(sid, kinds=["assistant"])) == 2
            and catalog.get_session(sid).status == "idle"
        )

    wait_for(answered_and_resting, timeout=60, what="the answer after the takeover")
    ledger.check()
    assert catalog.events(sid, kinds=["assistant"])[1].payload["text"] == "answered"
    with catalog.engine.connect() as conn:
        taken = sa.text("SELECT consumed_by FROM sd_inbox WHERE session_id = :s")
        assert list(conn.execute(taken, {"s": sid}).scalars()) == ["g0:d2"]
    # The replay kept the first run's record: its two receives, then the live ones (the
    # second of which the ring returned); a drain records no step of its own.
    steps = engine_steps(store, sid)
    assert steps[:4] == ["DBOS.recv", "DBOS.sleep", "DBOS.recv", "DBOS.sleep"], steps
    assert set(steps) == {"DBOS.recv", "DBOS.sleep"}, steps
