"""An upgrade keeps the sessions in flight: a worker of the next release takes over a
session that a worker of this one left waiting when it was killed (issue 17's fleet, and
what a permanent system agent or a cron session needs: they never drain)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa

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


# The last commit whose session workflow is format 1 (its wait looked at the inbox twice
# before it slept): the release before format 2.
FORMAT_1_COMMIT = "4c985a03b94502ce7ef220f89979e61b47fc2430"
# The last landed commit whose session workflow is format 3 (its wait took a look, `waiting_at`,
# before it slept): the release before format 4.
FORMAT_3_COMMIT = "dc1d3e72d531b4e19fc4ce05ce926c6d633b6392"
# The last commit whose session workflow is format 4 (a session resting after its turn
# looked at the inbox and the clock before it waited): the release before format 5.
FORMAT_4_COMMIT = "d24920c6b232c74b11f2f85238e74848605faf92"
# The last commit whose session workflow is format 5 (the loop's drains were engine steps):
# the release before format 6.
FORMAT_5_COMMIT = "12b89dea661253150e24e5abacfceadc3336a65b"


def format_1_source(into: Path, commit: str = FORMAT_1_COMMIT) -> Path:
    """The package as that commit (format 1's, unless told) had it, for a worker of that
    release to import."""
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs the git history of the repository")
    found = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
        capture_output=True,
    )
    if found.returncode != 0:
        shallow = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--is-shallow-repository"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        # A shallow clone may lack it; a whole one must have it (else the name is wrong).
        if shallow == "true":
            pytest.skip(f"commit {commit[:8]} is not in this shallow clone's history")
        pytest.fail(f"commit {commit[:8]} is not in this repository's history: name a landed one")
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", commit, "src"],
        capture_output=True,
        check=True,
    ).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def test_a_wait_of_format_1_replays_unchanged_under_format_2(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    """A worker running the code of the release before (format 1: a second look before the
    sleep) is killed while a session waits; a worker of this code (format 2: no second
    look) recovers the wait from the old log and finishes it at its original deadline."""
    old_src = format_1_source(sd_home.parent / "format-1")
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted({"napper": Agent([calls(call("wait", seconds=NAP_S)), text("napped")])})
    fake_llm.set_script(script)
    old = fleet.start("host-a", release=__version__, PYTHONPATH=str(old_src))
    sid = Host().create_session(SessionRequest("napper", "fake", workdir), fleet=True).id
    catalog = open_catalog()
    wait_for(lambda: catalog.get_session(sid).status == "waiting", what="the wait")
    # Its second look (the engine records a recv as it ends, not as it begins).
    wait_for(lambda: "mail_at" in engine_steps(store, sid), what="the old wait's look")
    nap_began = catalog.events(sid, kinds=["assistant"])[0].ts
    ledger = TurnLedger(script, catalog, fake_llm)
    fleet.kill(old)
    ledger.killed()
    assert catalog.get_session(sid).status == "waiting"
    # The old release's steps: the wait looked twice before it slept.
    assert engine_steps(store, sid)[:2] == ["waiting_at", "mail_at"]

    new = fleet.start("host-b")
    wait_for(
        lambda: catalog.get_session(sid).status == "completed",
        timeout=60,
        what="this release's worker to finish the format-1 session",
    )
    record = catalog.get_session(sid)
    assert (record.final_text, record.executor) == ("napped", new.executor_id)
    ledger.check()
    woke = catalog.events(sid, kinds=["assistant"])[1].ts
    assert woke >= nap_began + NAP_S - 0.5
    steps = engine_steps(store, sid)
    assert steps == ["waiting_at", "mail_at", "DBOS.recv", "DBOS.sleep", "mail_at"], steps
    waited = catalog.events(sid, kinds=["tool_result"])[0]
    assert waited.payload["content"] == f"waited {NAP_S:g} seconds"


@pytest.mark.parametrize("message", [False, True], ids=["timeout", "message"])
def test_a_wait_of_format_3_replays_unchanged_under_format_4(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet, message: bool
) -> None:
    """A worker running the code of the release before (format 3: a look, `waiting_at`,
    before the sleep, and one after it) is killed while a session waits; a worker of this
    code (format 4: no look before the sleep) recovers the wait from the old log, on the
    old path: it ends at its original deadline, or early for a message sent meanwhile,
    which is answered first."""
    old_src = format_1_source(sd_home.parent / "format-3", FORMAT_3_COMMIT)
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    # A message must find the wait still on after the takeover: a nap long enough for that.
    nap = 120.0 if message else NAP_S
    script = Scripted({"napper": Agent([calls(call("wait", seconds=nap)), text("napped")])})
    fake_llm.set_script(script)
    old = fleet.start("host-a", release=__version__, PYTHONPATH=str(old_src))
    sid = Host().create_session(SessionRequest("napper", "fake", workdir), fleet=True).id
    catalog = open_catalog()
    wait_for(lambda: catalog.get_session(sid).status == "waiting", what="the wait")
    # Its look, and the sleep of its receive (recorded as it begins; the recv as it ends).
    wait_for(lambda: "DBOS.sleep" in engine_steps(store, sid), what="the old wait's sleep")
    nap_began = catalog.events(sid, kinds=["assistant"])[0].ts
    ledger = TurnLedger(script, catalog, fake_llm)
    fleet.kill(old)
    ledger.killed()
    # The old release's steps: the wait looked once, then slept.
    assert engine_steps(store, sid) == ["waiting_at", "DBOS.sleep"]

    new = fleet.start("host-b")
    if message:
        # Sent once the new worker has taken the session over (the wait is on again).
        wait_for(lambda: catalog.get_session(sid).executor == new.executor_id, timeout=60)
        Host().send(sid, "wake up")
    wait_for(
        lambda: catalog.get_session(sid).status == "completed",
        timeout=60,
        what="this release's worker to finish the format-3 session",
    )
    record = catalog.get_session(sid)
    assert (record.final_text, record.executor) == ("napped", new.executor_id)
    ledger.check()
    woke = catalog.events(sid, kinds=["assistant"])[1].ts
    steps = engine_steps(store, sid)
    waited = catalog.events(sid, kinds=["tool_result"])[0]
    if message:
        assert woke < nap_began + nap - 0.5
        assert waited.payload["content"].startswith("wait ended early")
        # ...and the message joined the conversation before the turn that answered it.
        after = [e.kind for e in catalog.events(sid) if e.seq > waited.seq]
        assert after[:2] == ["user", "assistant"], after
    else:
        assert woke >= nap_began + nap - 0.5
        assert waited.payload["content"] == f"waited {nap:g} seconds"
    # Format 3's steps, replayed then continued: the recv (with its sleep), the look after.
    assert steps == ["waiting_at", "DBOS.recv", "DBOS.sleep", "mail_at"], steps


def test_an_idle_session_of_format_3_wakes_on_its_old_path_under_format_4(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    """A persistent session that a worker of the release before left resting (format 3:
    its `idle` and its `running` each a step) is woken by a message after a worker of this
    code took it over: it answers, and rests again, in format 3's steps."""
    sid, ledger = rest_on_the_old_release(store, sd_home, workdir, fake_llm, fleet, "format-3")
    catalog = open_catalog()
    assert catalog.get_session(sid).status == "idle"
    # Resting: its idle status step, the drain that found nothing, the clock, the recv's sleep.
    assert engine_steps(store, sid) == ["status", "drain", "now", "DBOS.sleep"]

    new = fleet.start("host-b")
    wait_for(lambda: catalog.get_session(sid).executor == new.executor_id, timeout=60)
    Host().send(sid, "a person asks")
    wait_for(
        lambda: (
            len(catalog.events(sid, kinds=["assistant"])) == 2
            and catalog.get_session(sid).status == "idle"
            # The `idle` step writes the status, then DBOS records the step: wait for both.
            and engine_steps(store, sid).count("status") == 3
        ),
        timeout=60,
        what="this release's worker to answer the format-3 session and rest it again",
    )
    ledger.check()
    assert catalog.events(sid, kinds=["assistant"])[1].payload["text"] == "answered"
    # Format 3's path, replayed then continued: the recovered recv, the drain that took
    # the message, its own `running` step, then the next rest's `idle` step (format 4
    # takes neither status step).
    steps = engine_steps(store, sid)
    assert steps[:4] == ["status", "drain", "now", "DBOS.recv"], steps
    woke = steps.index("drain", steps.index("DBOS.recv"))
    assert steps[woke : woke + 3] == ["drain", "status", "status"], steps


def test_a_rest_of_format_4_wakes_on_its_old_path_under_format_5(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    """A persistent session that a worker of the release before left resting after its
    turn (format 4: a drain and a look at the clock before the recv) is woken by a message
    after a worker of this code took it over: it answers and rests again on format 4's
    path, while a session this code starts rests on format 5's (the recv at once)."""
    sid, ledger = rest_on_the_old_release(store, sd_home, workdir, fake_llm, fleet, "format-4")
    catalog = open_catalog()
    assert engine_steps(store, sid) == ["drain", "now", "DBOS.sleep"]

    new = fleet.start("host-b")
    wait_for(lambda: catalog.get_session(sid).executor == new.executor_id, timeout=60)
    Host().send(sid, "a person asks")

    def answered_and_resting() -> bool:
        return (
            len(catalog.events(sid, kinds=["assistant"])) == 2
            and catalog.get_session(sid).status == "idle"
            and engine_steps(store, sid).count("DBOS.sleep") == 2
        )

    wait_for(answered_and_resting, timeout=60, what="the format-4 session's answer")
    ledger.check()
    assert catalog.events(sid, kinds=["assistant"])[1].payload["text"] == "answered"
    # Replayed, then continued on format 4's path: the recovered recv, the drain that took
    # the message, and the next rest's drain and clock before its recv.
    steps = engine_steps(store, sid)
    assert steps == [
        "drain",
        "now",
        "DBOS.recv",
        "DBOS.sleep",
        "drain",
        "drain",
        "now",
        "DBOS.sleep",
    ]

    fresh = Host().create_session(replace(CHAT, workdir=workdir), fleet=True).id
    wait_for(lambda: "DBOS.sleep" in engine_steps(store, fresh), what="the new session's rest")
    assert engine_steps(store, fresh) == ["DBOS.sleep"]


def test_a_rest_of_format_5_wakes_on_its_old_path_under_format_6(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet
) -> None:
    """A persistent session that a worker of the release before left resting (format 5:
    its drains were engine steps) is woken by a message after a worker of this code took it
    over: it takes the message in a drain step, as format 5 did, while a session this code
    starts takes its message with no step (format 6: the claim is the drain's record)."""
    sid, ledger = rest_on_the_old_release(store, sd_home, workdir, fake_llm, fleet, "format-5")
    catalog = open_catalog()
    assert engine_steps(store, sid) == ["DBOS.sleep"]

    new = fleet.start("host-b")
    wait_for(lambda: catalog.get_session(sid).executor == new.executor_id, timeout=60)
    Host().send(sid, "a person asks")

    def answered_and_resting(session: str) -> bool:
        return (
            len(catalog.events(session, kinds=["assistant"])) == 2
            and catalog.get_session(session).status == "idle"
            and engine_steps(store, session).count("DBOS.sleep") == 2
        )

    wait_for(lambda: answered_and_resting(sid), timeout=60, what="the format-5 session's answer")
    ledger.check()
    assert catalog.events(sid, kinds=["assistant"])[1].payload["text"] == "answered"
    # The recovered recv, format 5's drain step that took the message, the next rest's recv.
    assert engine_steps(store, sid) == ["DBOS.recv", "DBOS.sleep", "drain", "DBOS.sleep"]

    fresh = Host().create_session(replace(CHAT, workdir=workdir), fleet=True).id
    wait_for(lambda: "DBOS.sleep" in engine_steps(store, fresh), what="the new session's rest")
    Host().send(fresh, "a person asks")
    wait_for(lambda: answered_and_resting(fresh), timeout=60, what="the new session's answer")
    assert engine_steps(store, fresh) == ["DBOS.recv", "DBOS.sleep", "DBOS.sleep"]


CHAT = SessionRequest("chat with me", "fake", Path("."), options={"one_shot": False})
RELEASES = {
    "format-3": FORMAT_3_COMMIT,
    "format-4": FORMAT_4_COMMIT,
    "format-5": FORMAT_5_COMMIT,
}


def rest_on_the_old_release(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet, release: str
) -> tuple[str, TurnLedger]:
    """A persistent session that a worker of that release ran to its first rest, then was
    SIGKILLed: (its id, the ledger of the turns asked so far)."""
    old_src = format_1_source(sd_home.parent / release, RELEASES[release])
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted({"chat": Agent([text("hello"), text("answered")])})
    fake_llm.set_script(script)
    old = fleet.start("host-a", release=__version__, PYTHONPATH=str(old_src))
    sid = Host().create_session(replace(CHAT, workdir=workdir), fleet=True).id
    wait_for(lambda: "DBOS.sleep" in engine_steps(store, sid), what="the old session's rest")
    ledger = TurnLedger(script, open_catalog(), fake_llm)
    fleet.kill(old)
    ledger.killed()
    return sid, ledger


def engine_steps(store: Store, workflow: str) -> list[str]:
    """The names of a workflow's recorded engine steps, in order."""
    table = "dbos.operation_outputs" if store.is_postgres else "operation_outputs"
    with open_catalog().engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT function_name FROM {table} WHERE workflow_uuid = :wf ORDER BY function_id"
            ),
            {"wf": workflow},
        )
        return [str(name) for (name,) in rows]
