"""Sessions through the `swarmdeck` command, across processes: the inbox (`sessions send`),
ask_user (`sessions answer`), cancelling and removing a tree (`sessions cancel`, `rm`)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from swarmdeck import Swarm
from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    assistant_turns,
    await_for,
    call,
    calls,
    finish,
    last_json,
    live,
    open_catalog,
    popen_cli,
    sigkill,
    status_is,
    text,
    tool_results,
    tree_of,
    user_texts,
    wait_for,
)


def create_session(task: str, workdir: Path, **options: object) -> str:
    """Store a pending session without running it (a worker or `resume` runs it)."""
    host = Host()
    return host.create_session(SessionRequest(task, "fake", workdir, options=dict(options))).id


def test_inbox_send_running_idle_offline_and_dedup(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    first_turn_may_end = threading.Event()

    def first_turn(_req: FakeRequest) -> Reply:
        first_turn_may_end.wait(60)  # keeps the session `running` while a message comes in
        return text("ready")

    def echo(req: FakeRequest) -> Reply:
        return text("echo: " + user_texts(req)[-1])

    script = Scripted({"chat": Agent([first_turn], rest="")})
    script.agents["chat"].turns += [echo] * 10
    fake_llm.set_script(script)
    sid = create_session("chat with me", workdir, one_shot=False)
    catalog = open_catalog()

    runner = popen_cli(sd_home, "sessions", "resume", sid)
    try:
        wait_for(lambda: script.asked.get("chat") == 1, what="the first turn to be asked")
        assert catalog.get_session(sid).status == "running"
        # A client retry: two sends with the same id at once; exactly one is delivered.
        sends = [popen_cli(sd_home, "sessions", "send", sid, "during", "--id", "m1") for _ in "ab"]
        outs = [finish(p) for p in sends]
        assert [code for code, _, _ in outs] == [0, 0], outs
        assert sorted(last_json(out)["duplicate"] for _, out, _ in outs) == [False, True]
        first_turn_may_end.set()
        wait_for(lambda: len(assistant_turns(catalog, sid)) == 2, what="the reply to 'during'")
        wait_for(status_is(catalog, sid, "idle"))

        res = run_cli(sd_home, "sessions", "send", sid, "hello", "--id", "m2")
        assert res.code == 0 and last_json(res.stdout)["duplicate"] is False, res
        wait_for(lambda: len(assistant_turns(catalog, sid)) == 3, what="the reply to 'hello'")
        wait_for(status_is(catalog, sid, "idle"))
    finally:
        sigkill(runner)

    # No worker runs the session now: the message waits in the inbox.
    res = run_cli(sd_home, "sessions", "send", sid, "offline", "--id", "m3")
    assert res.code == 0, res
    assert catalog.pending_count(sid) == 1
    res = run_cli(sd_home, "worker", "--once", timeout=90)
    assert res.code == 0, res.stderr
    assert "took over" in res.stderr

    turns = [t.payload["text"] for t in assistant_turns(catalog, sid)]
    assert turns == ["ready", "echo: during", "echo: hello", "echo: offline"]
    users = [e.payload["text"] for e in catalog.events(sid, kinds=["user"])]
    assert users == ["during", "hello", "offline"]
    assert script.asked["chat"] == 4  # no turn asked twice
    assert catalog.pending_count(sid) == 0
    assert catalog.get_session(sid).status == "idle"


def test_ask_user_answered_from_another_process(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted(
        {
            "pick": Agent(
                [
                    calls(call("ask_user", question="which color?")),
                    lambda req: text("you said " + tool_results(req)[-1]),
                ]
            )
        }
    )
    fake_llm.set_script(script)
    run = popen_cli(sd_home, "run", "pick a color", "-m", "fake", "-C", str(workdir), "-q")
    catalog = open_catalog()
    try:
        sid = wait_for(lambda: next(iter(catalog.list_sessions()), None), what="the session").id
        wait_for(status_is(catalog, sid, "input_required"), what="the question")
        res = run_cli(sd_home, "sessions", "answer", sid, "blue", "--id", "a1")
        assert res.code == 0, res
        code, out, err = finish(run)
    finally:
        sigkill(run)
    assert code == 0, err
    assert out.strip() == "you said the user answered: blue"
    assert catalog.get_session(sid).status == "completed"
    # A client retry of the answer is a no-op, even after the session moved on; a new
    # answer to a session that asks nothing is refused with a hint.
    retry = popen_cli(sd_home, "sessions", "answer", sid, "blue", "--id", "a1")
    again = popen_cli(sd_home, "sessions", "answer", sid, "again")
    code, out, err = finish(retry)
    assert code == 0 and last_json(out)["duplicate"] is True, err
    code, out, err = finish(again)
    assert code != 0 and "not waiting for an answer" in err, err


def _executor_rows(catalog) -> int:
    """How many executors ever registered on the store (ended ones too)."""
    import sqlalchemy as sa

    from swarmdeck.catalog import schema

    with catalog.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(schema.workers)).scalar_one()


async def test_cancel_child_wakes_parent_then_rm_tree(
    sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted(
        {
            "long job": Agent([calls(call("wait", seconds=300))]),
            "root job": Agent(
                [
                    calls(
                        call("spawn_agent", task="long job 1", title="one"),
                        call("spawn_agent", task="long job 2", title="two"),
                    ),
                    calls(call("wait_for_agents", timeout=600)),
                    lambda req: text("root saw: " + tool_results(req)[-1][:12]),
                ]
            ),
        }
    )
    fake_llm.set_script(script)
    cli = asyncio.to_thread  # the sessions run on this event loop: never block it

    async with Swarm() as swarm:
        session = await swarm.start("root job", "fake", workdir=workdir)
        catalog = swarm.host.catalog
        await await_for(
            lambda: [s.status for s in tree_of(catalog, session.id)].count("waiting") == 2,
            what="two waiting children",
        )
        one, two = sorted(catalog.list_sessions(parent_id=session.id), key=lambda s: s.title)
        executors = _executor_rows(catalog)
        rm, cancel = await asyncio.gather(
            cli(run_cli, sd_home, "sessions", "rm", session.id),
            cli(run_cli, sd_home, "sessions", "cancel", one.id),
        )
        assert rm.code != 0 and "still has live sessions" in rm.stderr, rm
        assert cancel.code == 0 and last_json(cancel.stdout) == {"cancelled": [one.id]}, cancel
        assert _executor_rows(catalog) == executors  # no engine ran in the cancel's process
        assert catalog.get_session(session.id).status == "running"
        # Cancelling the last child wakes the parent from wait_for_agents at once.
        res = await cli(run_cli, sd_home, "sessions", "cancel", two.id)
        assert res.code == 0, res
        await await_for(status_is(catalog, session.id, "completed"), timeout=20)
        assert catalog.get_session(session.id).final_text == "root saw: all finished"

        res = await cli(run_cli, sd_home, "sessions", "rm", session.id)
        assert res.code == 0, res
        removed = last_json(res.stdout)["removed"]
        assert sorted(removed) == sorted([session.id, one.id, two.id])
        assert tree_of(catalog, session.id) == []
        assert not live(catalog.list_sessions(limit=100))


def test_send_pin_marks_the_message_that_compaction_keeps(
    sd_home: Path, workdir: Path, fake_llm
) -> None:
    """`sessions send --pin` stores the mark the compacted view keeps verbatim (the view
    itself: tests/unit/test_context_budget.py); a plain message carries no mark."""
    from swarmdeck.runtime.journal import Journal

    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    sid = Host().create_session(SessionRequest("t", "fake", workdir)).id
    pinned = run_cli(sd_home, "sessions", "send", sid[:12], "the API key lives in vault", "--pin")
    plain = run_cli(sd_home, "sessions", "send", sid, "and hello")
    assert (pinned.code, plain.code) == (0, 0), (pinned.stderr, plain.stderr)
    catalog = open_catalog()
    items = catalog.drain(sid, "test-claim", ["user"], None)
    assert [i.payload for i in items] == [
        {"text": "the API key lives in vault", "pinned": True},
        {"text": "and hello"},
    ]
    for item in items:  # as the session records them when it takes its mail
        catalog.append_event(sid, f"inbox:{item.msg_id}", "user", item.payload)
    journal = Journal(sid)
    journal.refresh(catalog)
    assert [pin for _, kind, pin in journal.sources if kind == "user"] == [True, False]
