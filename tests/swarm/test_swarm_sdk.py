"""`Swarm.coordinate(task, team=...)` in the SDK: the same swarm, in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck import Swarm
from swarmdeck.errors import UsageError
from tests.conftest import write_provider
from tests.integration.test_sessions_support import Agent, Scripted, text
from tests.swarm.support import RESULTS, coordinator, member, plan_of


async def test_coordinate_returns_the_swarm_object(sd_home: Path, workdir: Path, fake_llm) -> None:
    plan = plan_of(
        {"role": "security", "task": "SEC: look", "mode": "review"},
        {"role": "tests", "task": "TESTS: run", "mode": "test", "depends_on": ["security"]},
    )
    script = Scripted(
        {
            "SDK SWARM": coordinator(plan, merged="merged in process"),
            "SEC:": member("review"),
            "TESTS:": member("test"),
            "GIVEN PLAN": Agent([text("merged the given plan")]),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    swarm = Swarm()
    try:
        doc = await swarm.coordinate("SDK SWARM", team="review", workdir=workdir, model="fake")
        assert doc["type"] == "swarmdeck.swarm" and doc["verdict"] == "completed"
        assert [m["result"] for m in doc["members"]] == [RESULTS["review"], RESULTS["test"]]
        assert doc["result"] == {"summary": "merged in process", "merged_by": "model"}
        # A plan given as data skips the decomposition.
        given = await swarm.coordinate(
            "GIVEN PLAN",
            workdir=workdir,
            model="fake",
            plan=[{"role": "security", "task": "SEC: again", "mode": "review"}],
        )
        assert given["plan"]["source"] == "file" and given["verdict"] == "completed"
        assert script.asked["GIVEN PLAN"] == 1
        with pytest.raises(UsageError, match="the swarm needs a model"):
            await swarm.coordinate("no model", workdir=workdir)
    finally:
        await swarm.aclose()
