"""Budgets through the SDK (AgentSpec(budget=...)): total turns, tokens and cost; a child
draws from its parent's budget; the session ends `budget_exceeded`."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck import AgentSpec, Swarm
from swarmdeck.testing.script import FakeRequest, Reply, ReplyUsage
from tests.conftest import write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    assistant_turns,
    await_for,
    call,
    calls,
    open_catalog,
    status_is,
    wait_for,
)

# A model that never stops: a read tool every turn.
BUSY = Reply(tool_calls=(call("list_artifacts"),), usage=ReplyUsage(input=1_000_000, output=0))


@pytest.mark.parametrize(
    ("budget", "model", "turns", "why"),
    [
        ({"max_turns_total": 3}, "fake", 3, "max_turns_total 3 of its limit 3"),
        ({"max_tokens": 2_500_000}, "fake", 3, "max_tokens 3e+06 of its limit 2.5e+06"),
        # gpt-4o input is priced at $2.50 per million tokens: two turns cost $5.
        ({"max_cost": 4.0}, "openai:gpt-4o", 2, "max_cost 5 of its limit 4"),
    ],
)
async def test_budget_stops_the_session(
    sd_home: Path,
    fake_llm,
    workdir: Path,
    budget: dict[str, float],
    model: str,
    turns: int,
    why: str,
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    write_provider(sd_home, "openai", fake_llm.openai_base_url, model="gpt-4o")
    fake_llm.set_script(lambda _req: BUSY)
    async with Swarm() as swarm:
        session = await swarm.start("spend", AgentSpec(model, budget=budget), workdir=workdir)
        res = await session.result(timeout=30)
        assert res.status == "budget_exceeded", res
        assert res.error == f"budget exceeded: {why}"
        assert swarm.host.catalog.usage_totals([session.id]).turns == turns
        assert len(fake_llm.requests) == turns


async def test_child_draws_from_parent_budget(sd_home: Path, fake_llm, workdir: Path) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = Scripted(
        {
            "spender": Agent([], rest=""),
            "parent job": Agent(
                [
                    calls(call("spawn_agent", task="spender job")),
                    calls(call("wait_for_agents", timeout=60)),
                ],
                rest="parent carries on",
            ),
        }
    )
    catalog = open_catalog()

    def spend_after_parent_waits(_req: FakeRequest) -> Reply:
        # Ordering, not timing: the parent's two turns are stored before the child spends,
        # so who reaches the limit first is fixed.
        parent = next(s for s in catalog.list_sessions() if s.task == "parent job")
        wait_for(lambda: len(assistant_turns(catalog, parent.id)) == 2, what="parent turns")
        return BUSY

    script.agents["spender"].turns = [spend_after_parent_waits] + [BUSY] * 50
    fake_llm.set_script(script)
    async with Swarm() as swarm:
        spec = AgentSpec("fake", budget={"max_turns_total": 4})
        session = await swarm.start("parent job", spec, workdir=workdir)
        await await_for(status_is(catalog, session.id, "budget_exceeded"), timeout=30)
        (child,) = catalog.list_sessions(parent_id=session.id)
        assert child.status == "budget_exceeded"
        assert child.error == (
            f"budget exceeded: max_turns_total 4 of ancestor {session.id}'s limit 4"
        )
        # Parent turn 0 (spawn) and 1 (wait), then the child's two turns use up all four;
        # the parent, woken by its child's end, is stopped before a fifth.
        assert catalog.usage_totals([session.id]).turns == 2
        assert catalog.usage_totals([child.id]).turns == 2
        assert script.asked == {"parent job": 2, "spender": 2}
