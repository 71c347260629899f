"""The session workflow's engine steps are its format (engine.WORKFLOW_FORMAT, which each
workflow records as it starts): a release that changes them must name a new format and keep
the old path for workflows of the old one, or the sessions an upgrade finds waiting would
be replayed against steps they never took. This pins them for the paths every session
takes (tests/chaos/test_upgrade.py replays waits of formats 1 and 3, and rests of 3 and 4)."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from swarmdeck.runtime.engine.workflow import WORKFLOW_FORMAT
from tests.conftest import run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    open_catalog,
    text,
)

# The engine steps of each workflow of a one-shot session (format 6), by name, in order:
# the wait for the sub-agent looks again after each wake-up, as often as timing makes it,
# and the wait itself looks only after a ring before its deadline (a child's stale ring
# may be one). Formats 4 and 5 took a `drain` step before the wait (format 6's drain is
# recorded by its claim in the inbox). Formats 2 and 3 began a wait with a look of its own,
# `waiting_at`, and looked again after every wake-up
# (`waiting_at( DBOS.recv( DBOS.sleep)? mail_at)+`); format 1 took one more look,
# `mail_at`, right after `waiting_at`.
ONE_SHOT_STEPS = {
    "root": r"spawn swarmdeck\.session now children now"
    r"( DBOS\.recv( DBOS\.sleep)? children now)*"
    r" DBOS\.recv( DBOS\.sleep)?( mail_at DBOS\.recv( DBOS\.sleep)?)*",
    "child": r"DBOS\.send",
}


def operations(store_url: str) -> list[tuple[str, str, str | None]]:
    """Every workflow's engine steps, in order: (workflow, name, recorded output)."""
    engine = sa.create_engine(store_url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT workflow_uuid, function_name, output FROM operation_outputs "
                "ORDER BY workflow_uuid, function_id"
            )
        ).all()
    return [(wf, name, output) for wf, name, output in rows]


def engine_steps(store_url: str) -> dict[str, str]:
    """Each workflow's engine steps by name, in order, keyed by the session's task."""
    catalog = open_catalog()
    names: dict[str, list[str]] = {}
    for wf, name, _output in operations(store_url):
        names.setdefault(wf, []).append(name)
    return {
        catalog.get_session(s.id).task.split()[0]: " ".join(names.get(s.id, []))
        for s in catalog.list_sessions()
    }


def test_a_one_shot_sessions_engine_steps_are_pinned(
    sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted(
        {
            "child": Agent([text("child done")]),
            "root": Agent(
                [
                    calls(call("spawn_agent", task="child job")),
                    calls(call("wait_for_agents", timeout=60)),
                    calls(call("wait", seconds=0.2)),
                    text("root done"),
                ]
            ),
        }
    )
    fake_llm.set_script(script)
    res = run_cli(sd_home, "run", "root job", "-m", "fake", "-C", str(workdir), "-q", timeout=120)
    assert res.code == 0, res.stderr
    found = engine_steps(f"sqlite:///{sd_home / 'swarmdeck.sqlite'}")
    assert set(found) == set(ONE_SHOT_STEPS), found
    changed = {
        task: steps
        for task, steps in found.items()
        if not re.fullmatch(ONE_SHOT_STEPS[task], steps)
    }
    assert not changed, (
        f"the session workflow's engine steps changed: {changed}. Waiting sessions of "
        f"format {WORKFLOW_FORMAT} would replay against them after an upgrade: raise "
        "WORKFLOW_FORMAT (runtime/engine/workflow.py), keep the old path for the old "
        "format, and write the new steps here"
    )


# Format 3: an idle session that a person's message wakes takes it at once: the drain that
# took it was followed by the status write of its turn. Format 2 first waited for the
# batch's quiet gap (a look at the clock, another recv, another drain). Format 4: no status
# step at all, the drain that took the message marked the session running, and the turn
# that rests stores `idle` with it; only the next rest's drain may follow. Format 5: a
# session that rests after its turn waits on the doorbell at once (no drain, no clock):
# the recv, the drain that took the message, then the next rest's recv. Format 6: the drain
# is no step (its claim in the inbox records it): the recv, then the next rest's recv.
def claims(store_url: str, session_id: str) -> list[str | None]:
    """The claim each message of a session's inbox was taken under, in order."""
    engine = sa.create_engine(store_url)
    with engine.connect() as conn:
        found = sa.text("SELECT consumed_by FROM sd_inbox WHERE session_id = :s ORDER BY id")
        return list(conn.execute(found, {"s": session_id}).scalars())


async def test_a_persons_message_wakes_an_idle_session_without_the_batch_gap(
    sd_home: Path, workdir: Path, fake_llm
) -> None:
    from swarmdeck.runtime.host import Host, SessionRequest
    from tests.integration.test_sessions_support import await_for, status_is

    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(Scripted({"chat": Agent([text("hello"), text("again")])}))
    host = Host()
    record = host.create_session(
        SessionRequest("chat with me", "fake", workdir, options={"one_shot": False})
    )
    host.launch()
    frontier_reads: list[str] = []

    def on_statement(*args: object) -> None:
        statement = str(args[2])
        if "operation_outputs" in statement and "max(" in statement:
            frontier_reads.append(statement)

    sa.event.listen(sa.Engine, "before_cursor_execute", on_statement)
    try:
        await host.start(record.id)
        await await_for(status_is(host.catalog, record.id, "idle"), 60)
        host.send(record.id, "a person asks")
        await host.ring(record.id)
        await await_for(lambda: len(host.catalog.events(record.id, kinds=["assistant"])) == 2, 60)
        await await_for(status_is(host.catalog, record.id, "idle"), 60)
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", on_statement)
        await host.aclose()
    # The execution stored its generation's start, so it retraces no earlier one: its drain
    # never asks the engine where an earlier run's record ends.
    assert frontier_reads == []
    assert WORKFLOW_FORMAT == 6
    url = f"sqlite:///{sd_home / 'swarmdeck.sqlite'}"
    steps = [name for wf, name, _output in operations(url) if wf == record.id]
    # DBOS records a recv's timeout as a `DBOS.sleep` as it begins, the recv as it returns.
    assert steps == ["DBOS.recv", "DBOS.sleep", "DBOS.sleep"], steps
    assert claims(url, record.id) == ["g0:d1"]  # the loop's first drain took it
