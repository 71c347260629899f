"""max_turns of a session that waits between turns (persistent, cron) counts per wake-up,
not over its life: the lifetime limits are the budgets'. A one-shot session keeps its cap
over its life. Through the SDK, on both stores, against the fake server."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from swarmdeck import AgentSpec, Swarm
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, write_provider
from tests.integration.test_sessions_support import call, calls, text, user_texts

LOOK = calls(call("list_dir", path="."))


@pytest.fixture
def swarm(store: Store, sd_home: Path, fake_llm):
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    s = Swarm()
    yield s
    s.close()


def turns_of(swarm: Swarm, sid: str) -> int:
    return len(swarm.host.catalog.events(sid, kinds=["assistant"]))


async def wait_until(predicate, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def rested(swarm: Swarm, sid: str, turns: int) -> None:
    """Wait until the session took `turns` turns and rests on its inbox."""
    catalog = swarm.host.catalog
    await wait_until(
        lambda: turns_of(swarm, sid) >= turns and catalog.get_session(sid).status == "idle",
        what=f"{turns} turns and idle",
    )


async def test_a_persistent_session_answers_after_50_turns_in_its_life(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    """The default max_turns is 50: the task takes 50 turns (49 tool calls, then the
    answer), and the next message is still answered, and the one after it."""

    def work_then_echo(req: FakeRequest) -> Reply:
        if len(user_texts(req)) == 1:
            return LOOK if req.turn < 49 else text("task done")
        return text(f"answer to {user_texts(req)[-1]}")

    fake_llm.set_script(work_then_echo)
    session = await swarm.start("chat", AgentSpec("fake", persistent=True), workdir=workdir)
    await rested(swarm, session.id, 50)
    for n, message in enumerate(["the 51st turn", "the 52nd turn"], start=51):
        await session.send(message)
        await rested(swarm, session.id, n)
        last = swarm.host.catalog.events(session.id, kinds=["assistant"])[-1]
        assert last.payload["text"] == f"answer to {message}"
    assert swarm.host.catalog.get_session(session.id).status == "idle"
    assert not swarm.host.catalog.events(session.id, kinds=["notice"])


async def test_the_cap_stops_one_wake_up_and_the_session_lives_on(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    def loop_until_told(req: FakeRequest) -> Reply:
        # Loops on tool calls for its first wake-up; answers at once afterwards.
        return text("done") if len(user_texts(req)) > 1 else LOOK

    fake_llm.set_script(loop_until_told)
    spec = AgentSpec("fake", persistent=True, max_turns=5)
    session = await swarm.start("loop", spec, workdir=workdir)
    await rested(swarm, session.id, 5)
    assert turns_of(swarm, session.id) == 5
    [notice] = swarm.host.catalog.events(session.id, kinds=["notice"])
    assert notice.payload["what"] == "turn_cap" and "5 turns" in notice.payload["text"]
    await session.send("stop looping")
    await rested(swarm, session.id, 6)
    assert swarm.host.catalog.get_session(session.id).status == "idle"


async def test_a_long_session_passes_its_lifetime_turns_and_rolls_over_after_a_cap(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    """Wake-ups of 4 turns with max_turns 5 go past 5 turns in all; a cap met right before
    a rollover leaves the next generation resting, not asking the model again."""

    def looks_then_answer(req: FakeRequest) -> Reply:
        if "forever" in user_texts(req)[-1]:
            return LOOK
        since = 0
        for m in reversed(req.messages):
            if m.get("role") == "user":
                break
            since += m.get("role") == "assistant"
        return LOOK if since < 3 else text("answered")

    fake_llm.set_script(looks_then_answer)
    spec = AgentSpec("fake", persistent=True, max_turns=5, options={"rollover_iterations": 12})
    session = await swarm.start("talk", spec, workdir=workdir)
    await rested(swarm, session.id, 4)
    await session.send("again")
    await rested(swarm, session.id, 8)  # 8 turns in all, more than max_turns
    await session.send("loop forever")
    # Capped at 5 turns (13 in all), which used up the generation's 12 iterations.
    catalog = swarm.host.catalog
    await wait_until(lambda: catalog.get_session(session.id).generation == 1, what="rollover")
    await rested(swarm, session.id, 13)
    await asyncio.sleep(0.5)
    assert turns_of(swarm, session.id) == 13, "the new generation asked the model again"
    await session.send("now answer")
    await rested(swarm, session.id, 17)
    last = catalog.events(session.id, kinds=["assistant"])[-1]
    assert last.payload["text"] == "answered"


async def test_a_one_shot_session_keeps_its_cap_over_its_life(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    fake_llm.set_script(lambda _req: LOOK)
    session = await swarm.start("loop", AgentSpec("fake", max_turns=3), workdir=workdir)
    outcome = await session.result(timeout=30)
    assert outcome.status == "completed"
    assert turns_of(swarm, session.id) == 3
    ends = swarm.host.catalog.events(session.id, kinds=["status"])
    assert ends[-1].payload["reason"] == "step_cap"
