"""A loaded skill survives SIGKILL: killed while load_skill runs (its result not stored) or
right after (before the next turn is asked), the resumed session has the skill loaded and
its tools offered, and no stored turn is asked again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import (
    call,
    calls,
    expect_killed,
    open_catalog,
    popen_cli,
    text,
)
from tests.plugins.support import write

pytestmark = pytest.mark.chaos


@pytest.mark.parametrize("kill_at", ["tool.after:1", "llm.before:2"])
def test_a_loaded_skill_survives_sigkill(
    store: Store, sd_home: Path, fake_llm, workdir: Path, kill_at: str
) -> None:
    write(
        workdir / ".swarmdeck/skills/stats/SKILL.md",
        "---\nname: stats\ndescription: The store's statistics.\n---\nRead the stats.\n",
    )
    write(workdir / ".swarmdeck/skills/stats/tools.json", '{"tools": ["get_system_stats"]}')
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    asked: Counter[int] = Counter()
    offered: dict[int, set[str]] = {}

    def script(req: FakeRequest) -> Reply:
        asked[req.turn] += 1
        offered[req.turn] = {t["function"]["name"] for t in req.body.get("tools", [])}
        if req.turn == 0:
            return calls(call("load_skill", name="stats"))
        if req.turn == 1:
            return calls(call("get_system_stats"))
        return text("stats read")

    fake_llm.set_script(script)
    proc = popen_cli(
        sd_home,
        "run",
        "use the stats",
        "--model",
        "fake",
        "--workdir",
        str(workdir),
        "--mode",
        "agent",  # the maintenance tools are an agent's (short-form runs default to explore)
        SWARMDECK_CRASH_AT=kill_at,
    )
    expect_killed(proc)
    catalog = open_catalog()
    (session,) = catalog.list_sessions()
    res = run_cli(sd_home, "sessions", "resume", session.id, timeout=90)
    assert res.code == 0, res.stderr
    assert res.stdout.strip() == "stats read"
    assert asked == Counter({0: 1, 1: 1, 2: 1})  # no stored turn asked again
    assert "get_system_stats" not in offered[0] and "get_system_stats" in offered[1]
    results = [e.payload for e in catalog.events(session.id, kinds=["tool_result"])]
    assert [r["name"] for r in results] == ["load_skill", "get_system_stats"]
    assert not results[1]["is_error"] and '"sessions": 1' in results[1]["content"]
