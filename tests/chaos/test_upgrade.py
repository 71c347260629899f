"""An upgrade keeps the sessions in flight: a worker of the next release takes over a
session that a worker of this one left waiting when it was killed (issue 17's fleet, and
what a permanent system agent or a cron session needs: they never drain)."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck import __version__
from swarmdeck.runtime.host import Host, SessionRequest
from tests.conftest import Store, write_provider
from tests.integration.test_fleet_support import Fleet
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    TurnLedger,
    call,
    calls,
    open_catalog,
    text,
    wait_for,
)

pytestmark = [pytest.mark.chaos, pytest.mark.fleet]

NAP_S = 8.0


def next_release() -> str:
    """A version number after this one."""
    major, minor, *_ = __version__.split(".")
    return f"{major}.{int(minor) + 1}.0"


def test_a_worker_of_the_next_release_finishes_a_waiting_session(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted({"napper": Agent([calls(call("wait", seconds=NAP_S)), text("napped")])})
    fake_llm.set_script(script)
    old = fleet.start("host-a")
    sid = Host().create_session(SessionRequest("napper", "fake", workdir), fleet=True).id
    catalog = open_catalog()
    wait_for(lambda: catalog.get_session(sid).status == "waiting", what="the wait")
    nap_began = catalog.events(sid, kinds=["assistant"])[0].ts
    ledger = TurnLedger(script, catalog, fake_llm)
    fleet.kill(old)
    ledger.killed()

    new = fleet.start("host-b", release=next_release())
    wait_for(
        lambda: catalog.get_session(sid).status == "completed",
        timeout=60,
        what="the new release's worker to finish the session",
    )
    record = catalog.get_session(sid)
    assert (record.final_text, record.executor) == ("napped", new.executor_id)
    # Replayed, not started over: the turn before the wait was not asked again, and the
    # wait kept the deadline the old release set.
    ledger.check()
    woke = catalog.events(sid, kinds=["assistant"])[1].ts
    assert woke >= nap_began + NAP_S - 0.5
    keys = [e.key for e in catalog.events(sid)]
    assert len(keys) == len(set(keys)), keys
