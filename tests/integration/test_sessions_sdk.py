"""Durable session features through the Python SDK, in process, against the fake server."""

from __future__ import annotations

import asyncio
import json
import threading
import warnings
from pathlib import Path

import pytest

from swarmdeck import AgentSpec, Swarm, tool
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import write_provider
from tests.integration.test_sessions_support import Agent, Scripted, text, user_texts


def _call(tool_name: str, **arguments: object) -> dict:
    return {"name": tool_name, "arguments": arguments}


@pytest.fixture
def swarm(sd_home: Path, fake_llm):
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    s = Swarm()
    yield s
    s.close()


async def test_parent_spawns_children_and_writes_report(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    fake_llm.set_script(
        {
            "scenarios": [
                {"match": "child task", "turns": [{"text": "child done: {{task}}"}]},
                {
                    "match": "coordinate",
                    "turns": [
                        {
                            "tool_calls": [
                                _call("spawn_agent", task="child task A", title="A"),
                                _call("spawn_agent", task="child task B", title="B"),
                                _call("spawn_agent", task="child task C", title="C"),
                            ]
                        },
                        {"tool_calls": [_call("wait_for_agents", timeout=30)]},
                        {
                            "tool_calls": [
                                _call(
                                    "write_artifact",
                                    name="report.md",
                                    content="{{last_tool_result}}",
                                )
                            ]
                        },
                        {"text": "report written"},
                    ],
                },
            ]
        }
    )
    session = await swarm.start("coordinate three children", "fake", workdir=workdir)
    res = await session.result(timeout=30)
    assert res.status == "completed", res
    assert res.text == "report written"
    catalog = swarm.host.catalog
    children = catalog.list_sessions(parent_id=session.id)
    assert sorted(c.title for c in children) == ["A", "B", "C"]
    assert all(c.status == "completed" for c in children)
    assert all(c.final_text.startswith("child done") for c in children)
    art = catalog.artifact(session.id, "report.md")
    assert art is not None and "all finished" in Path(art["path"]).read_text()
    # wait_for_agents consumed the children's updates: no extra parent turn for them.
    assert len(catalog.events(session.id, kinds=["assistant"])) == 4


async def test_persistent_session_inbox_dedup(swarm: Swarm, fake_llm, workdir: Path) -> None:
    fake_llm.set_script(
        {"scenarios": [{"turns": [{"text": "hello"}, {"text": "got {{turn}}"}, {"text": "again"}]}]}
    )
    session = await swarm.start("chat", AgentSpec("fake", persistent=True), workdir=workdir)
    assert (await session.result(timeout=20)).status == "idle"
    assert await session.send("first", msg_id="m1") is True
    assert await session.send("first", msg_id="m1") is False  # a client retry
    await session.wait_for_status("running", "idle")
    await _wait_turns(swarm, session.id, 2)
    users = [e for e in session.transcript() if e.kind == "user"]
    assert [u.payload["text"] for u in users] == ["first"]


async def _wait_turns(swarm: Swarm, sid: str, n: int, timeout: float = 20) -> None:
    import asyncio

    for _ in range(int(timeout / 0.05)):
        turns = swarm.host.catalog.events(sid, kinds=["assistant"])
        if len(turns) >= n and swarm.host.catalog.get_session(sid).status == "idle":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"session {sid} did not reach {n} turns")


async def test_ask_user_then_answer(swarm: Swarm, fake_llm, workdir: Path) -> None:
    fake_llm.set_script(
        {
            "scenarios": [
                {
                    "turns": [
                        {"tool_calls": [_call("ask_user", question="which color?")]},
                        {"text": "you said {{last_tool_result}}"},
                    ]
                }
            ]
        }
    )
    session = await swarm.start("ask", "fake", workdir=workdir)
    await session.wait_for_status("input_required", timeout=20)
    await session.answer("blue")
    res = await session.result(timeout=20)
    assert res.status == "completed"
    assert "blue" in res.text


async def test_user_tool_decorator(sd_home: Path, fake_llm, workdir: Path) -> None:
    calls: list[int] = []

    @tool(effect="read")
    def add(a: int, b: int = 1) -> str:
        """Add two numbers."""
        calls.append(a + b)
        return str(a + b)

    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(
        {
            "scenarios": [
                {
                    "turns": [
                        {"tool_calls": [_call("add", a=2, b=3)]},
                        {"text": "sum {{last_tool_result}}"},
                    ]
                }
            ]
        }
    )
    with_tool = Swarm(tools=[add])
    try:
        session = await with_tool.start("add", "fake", workdir=workdir)
        res = await session.result(timeout=20)
    finally:
        await with_tool.aclose()
    assert res.text == "sum 5" and calls == [5]
    spec = next(
        t
        for t in json.loads(json.dumps(fake_llm.requests[0].body))["tools"]
        if t["function"]["name"] == "add"
    )
    assert spec["function"]["parameters"]["required"] == ["a"]


async def test_raising_tool_fails_the_call_not_the_session(
    sd_home: Path, fake_llm, workdir: Path
) -> None:
    import asyncio

    @tool(effect="read")
    def flaky() -> str:
        """Fails."""
        raise ValueError("boom")

    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(
        {
            "scenarios": [
                {
                    "turns": [
                        {"tool_calls": [_call("flaky")]},
                        {"text": "saw {{last_tool_result}}"},
                    ]
                }
            ]
        }
    )
    async with Swarm(tools=[flaky]) as swarm:
        session = await swarm.start("try it", "fake", workdir=workdir)
        res = await session.result(timeout=20)
    assert res.status == "completed", res
    assert res.text == "saw Error: error: ValueError: boom"
    # Closing the swarm leaves this event loop usable (the engine had taken its executor).
    assert await asyncio.to_thread(lambda: 42) == 42


async def test_persistent_result_waits_for_the_reply(swarm: Swarm, fake_llm, workdir: Path) -> None:
    fake_llm.set_script(
        {
            "scenarios": [
                {
                    "turns": [
                        {"text": "ready"},
                        {"text": "noted (turn {{turn}})", "delay": 0.3},
                        {"text": "noted again (turn {{turn}})"},
                    ]
                }
            ]
        }
    )
    session = await swarm.start("take notes", AgentSpec("fake", persistent=True), workdir=workdir)
    first = await session.result(timeout=20)
    assert (first.status, first.text) == ("idle", "ready")
    # Right after a send, result() waits for the answer to it, not the idle state before.
    await session.send("buy milk", msg_id="n1")
    assert (await session.result(timeout=20)).text == "noted (turn 1)"
    await session.send("buy eggs", msg_id="n2")
    assert (await session.result(timeout=20)).text == "noted again (turn 2)"


async def test_starting_a_session_again_never_runs_it_twice(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    # Starting a running or finished session again (a second `resume`, a retried start)
    # returns; only the start that created the workflow runs it.
    fake_llm.set_script(
        {
            "scenarios": [
                {
                    "turns": [
                        {"tool_calls": [_call("list_dir", path=".")], "delay": 0.3},
                        {"text": "done"},
                    ]
                }
            ]
        }
    )
    session = await swarm.start("look around", "fake", workdir=workdir)
    await swarm.host.start(session.id)  # while its first turn is on its way
    assert (await session.result(timeout=20)).status == "completed"
    await swarm.host.start(session.id)  # once it has finished
    assert (await swarm.host.wait(session.id))["status"] == "completed"
    assert len(fake_llm.requests) == 2
    kinds = [e.kind for e in session.transcript()]
    assert kinds.count("assistant") == 2 and kinds.count("tool_result") == 1


async def test_a_message_sent_during_the_last_turn_is_answered(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    # A one-shot session whose model ends its turn while a message waits takes one more
    # turn for it instead of ending with the message unread.
    asked = threading.Event()
    may_answer = threading.Event()

    def first_turn(_req: FakeRequest) -> Reply:
        asked.set()
        may_answer.wait(30)
        return text("done, I think")

    def second_turn(req: FakeRequest) -> Reply:
        return text("also: " + user_texts(req)[-1])

    script = Scripted({"short job": Agent([first_turn, second_turn])})
    fake_llm.set_script(script)
    session = await swarm.start("short job", "fake", workdir=workdir)
    await asyncio.to_thread(asked.wait, 30)
    await session.send("one more thing", msg_id="late")
    may_answer.set()
    outcome = await session.result(timeout=30)
    assert (outcome.status, outcome.text) == ("completed", "also: one more thing")
    assert script.asked["short job"] == 2


async def test_a_rerun_of_a_generation_starts_as_the_first_run_did(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    # The start of a generation is journaled: a rerun after a crash gets what the first run
    # found (no turns yet, running), not the session as it is now (turns taken, ended).
    from swarmdeck.runtime.execution import start_generation

    fake_llm.set_script({"scenarios": [{"turns": [{"text": "done"}]}]})
    session = await swarm.start("say done", "fake", workdir=workdir)
    assert (await session.result(timeout=20)).status == "completed"
    first = swarm.host.catalog.generation_start(session.id, 0)
    assert first is not None
    assert (first["turns_done"], first["terminal"], first["generation"]) == (0, False, 0)
    assert await start_generation(session.id, 0) == first
    # A generation that never ran, on a session that has ended, does not start.
    assert (await start_generation(session.id, 1))["terminal"]


@pytest.mark.parametrize("closing", ["aclose", "close"])
async def test_the_loop_runs_threads_after_the_swarm_closes(
    sd_home: Path, fake_llm, workdir: Path, closing: str
) -> None:
    """The engine shuts down the pool it made the loop's default executor; either way of
    closing gives the loop a working one back."""
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script({"scenarios": [{"turns": [{"text": "done"}]}]})
    swarm = Swarm()
    session = await swarm.start("one turn", "fake", workdir=workdir)
    assert (await session.result(timeout=30)).status == "completed"
    if closing == "aclose":
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            await swarm.aclose()
    else:
        # close() in a loop cannot close the pools (they need the loop), and says so.
        with pytest.warns(RuntimeWarning, match="await aclose"):
            swarm.close()
        await swarm.host.services.close_models()
    assert await asyncio.to_thread(lambda: "ran") == "ran"
