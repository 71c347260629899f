"""On PostgreSQL a worker hears of each message for a session at once (NOTIFY on the mail
channel at commit, naming the message and its session) instead of polling the inbox many
times a second; the process that runs the session rings it with no read."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from swarmdeck import AgentSpec, Swarm
from swarmdeck.catalog.catalog import MAIL_CHANNEL, Catalog
from swarmdeck.catalog.inbox import read_mail_note
from swarmdeck.catalog.notify import listen
from swarmdeck.catalog.records import InboxPost
from swarmdeck.errors import NotFoundError
from swarmdeck.runtime.engine.active_counts import CountedActiveWorkflows
from swarmdeck.runtime.engine.workflow import dbos_instance
from tests.conftest import Store, write_provider
from tests.integration.test_sessions_support import Agent, Scripted, await_for, status_is, text


def _heard_after(
    catalog: Catalog,
    store: Store,
    post: tuple[str, str, str],
    within: float = 5.0,
    live: bool = False,
) -> tuple[int, str] | None:
    """What the mail channel said within `within` s of posting (session, msg id, kind):
    the message's inbox id and its session; None when it said nothing. `live`: posted as
    a person's message is (Catalog.post_live), its NOTIFY in the insert's statement."""
    heard, listening = threading.Event(), threading.Event()
    notes: list[str] = []

    def on_mail(payload: str) -> None:
        # The listener rings once, saying nothing, as it starts (what came before went
        # unheard).
        if listening.is_set():
            notes.append(payload)
            heard.set()
        listening.set()

    stop = listen(store.url, {MAIL_CHANNEL: on_mail})
    try:
        assert listening.wait(10)
        if live:
            catalog.post_live(InboxPost(*post, {"text": "hello"}))
        else:
            catalog.post(*post, {"text": "hello"})
        if not heard.wait(within):
            return None
        note = read_mail_note(notes[0])
        assert note is not None, notes
        return note
    finally:
        stop.set()


def _inbox_id(catalog: Catalog, session_id: str, msg_id: str) -> int:
    return next(m.id for m in catalog.delivered(session_id) if m.msg_id == msg_id)


@pytest.mark.postgres
@pytest.mark.parametrize("store", ["postgres"], indirect=True)
def test_a_message_rings_the_mail_channel_once_delivered(store: Store) -> None:
    catalog = Catalog.open(store.url)
    catalog.create_session(
        session_id="s1", model="fake:m", mode="explore", workdir="/w", run_dir="/r", task="t"
    )
    # It names the message and its session: the worker that runs the session rings it
    # without reading the inbox.
    assert _heard_after(catalog, store, ("s1", "m1", "user")) == (
        _inbox_id(catalog, "s1", "m1"),
        "s1",
    )
    assert _heard_after(catalog, store, ("s1", "m2", "answer")) == (
        _inbox_id(catalog, "s1", "m2"),
        "s1",
    )
    # Nothing a worker would ring the session for: a duplicate (a client's retry), a
    # message of another kind.
    assert _heard_after(catalog, store, ("s1", "m1", "user"), within=1.0) is None
    assert _heard_after(catalog, store, ("s1", "m3", "notice"), within=1.0) is None
    # A person's message, checked, stored and rung in one statement, is heard the same.
    assert _heard_after(catalog, store, ("s1", "m4", "user"), live=True) == (
        _inbox_id(catalog, "s1", "m4"),
        "s1",
    )
    assert _heard_after(catalog, store, ("s1", "m4", "user"), within=1.0, live=True) is None
    assert _heard_after(catalog, store, ("s1", "m5", "notice"), within=1.0, live=True) is None


async def test_the_process_that_runs_a_resting_session_rings_it_without_a_read(
    store: Store, sd_home: Path, fake_llm: Any, workdir: Path
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted({"chat": Agent([text("ready")], rest="again")})
    fake_llm.set_script(script)
    async with Swarm() as swarm:
        session = await swarm.start("chat", AgentSpec("fake", persistent=True), workdir=workdir)
        catalog = swarm.host.catalog
        await await_for(status_is(catalog, session.id, "idle"), what="the session to rest")
        engine = swarm.host.engine
        assert engine is not None
        # DBOS's running set counts its queues as workflows come and go (no walk a poll).
        assert isinstance(dbos_instance()._active_workflows_set, CountedActiveWorkflows)
        catalog.post(session.id, "m1", "user", {"text": "hello"})
        assert await engine.ring_if_here(session.id)
        await await_for(lambda: script.asked.get("chat", 0) == 2, what="the rung turn")
        # Not here: a session this process never ran.
        assert not await engine.ring_if_here("no-such-session")
        # A person's message in this process is rung the same way: no look at the store.
        await await_for(status_is(catalog, session.id, "idle"), what="the session to rest")
        looked: list[str] = []
        asked_store = engine.current_workflow

        async def current_workflow(session_id: str) -> str:
            looked.append(session_id)
            return await asked_store(session_id)

        engine.current_workflow = current_workflow  # type: ignore[method-assign]
        swarm.host.send(session.id, "and this")
        await swarm.host.ring(session.id)
        await await_for(lambda: script.asked.get("chat", 0) == 3, what="the second rung turn")
        assert looked == []
        with pytest.raises(NotFoundError):  # not here: the store is asked, and knows none
            await swarm.host.ring("no-such-session")
        assert looked == ["no-such-session"]
