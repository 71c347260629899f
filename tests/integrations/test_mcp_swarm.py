"""The `swarm` tool of `swarmdeck mcp serve`, driven by the MCP SDK's own client over stdio:
a plan of two explore members against the fake LLM, the started object at once, the merged
swarm object from session_wait (also from a server started later), and bad input refused
with the contract's error object."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from swarmdeck.swarm.report import REPORT_FIELDS
from tests.conftest import Store, write_provider
from tests.integration.test_sessions_support import Agent, Scripted, text
from tests.integrations.mcp_support import payload, serve_params
from tests.swarm.support import RESULTS, member

mcp = pytest.importorskip("mcp")

PLAN = [
    {"role": "finder", "task": "FIND: where is main defined", "mode": "explore"},
    {"role": "mapper", "task": "MAP: list the modules", "mode": "explore"},
]


async def test_swarm_starts_at_once_and_session_wait_returns_the_merged_object(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    script = Scripted(
        {
            "SWARM IT": Agent([text("MERGED: main is in app.py")]),
            "FIND:": member("explore"),
            "MAP:": member("explore"),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    args = {"task": "SWARM IT: map the project", "workdir": str(workdir), "model": "fake"}
    async with mcp.Client(serve_params(sd_home)) as client:
        assert "swarm" in {t.name for t in (await client.list_tools()).tools}
        started = payload(await client.call_tool("swarm", {**args, "plan": PLAN}))
        assert started["type"] == "swarmdeck.swarm_started"
        assert started["workdir"] == str(workdir.resolve())
        assert started["model"] == "fake:scripted" and started["team"] is None
        sid = started["session_id"]
        done = payload(await client.call_tool("session_wait", {"session_id": sid, "timeout": 150}))
        assert done["type"] == "swarmdeck.swarm" and tuple(done) == REPORT_FIELDS
        assert done["session_id"] == sid and done["verdict"] == "completed"
        assert done["plan"]["source"] == "file"
        assert done["result"]["summary"] == "MERGED: main is in app.py"
        members = {m["role"]: m for m in done["members"]}
        assert set(members) == {"finder", "mapper"}
        for m in members.values():
            assert m["verdict"] == "completed" and m["result"] == RESULTS["explore"]
            assert m["session_id"] and m["session_id"] != sid
        assert script.asked["SWARM IT"] == 1  # the plan was given: no decomposition turn
        # The task and the plan went to the child in files only their owner reads.
        [folder] = (sd_home / "runs").glob("swarm-*")
        for name in ("task.md", "plan.json"):
            assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
        assert (folder / "task.md").read_text() == args["task"]
    # A server started later rebuilds the same object from the catalog.
    async with mcp.Client(serve_params(sd_home)) as client:
        again = payload(await client.call_tool("session_wait", {"session_id": sid, "timeout": 5}))
        assert again == done


async def test_bad_swarm_input_is_the_contract_error(
    sd_home: Path, workdir: Path, tmp_path: Path
) -> None:
    write_provider(sd_home, "fake", "http://127.0.0.1:9/v1")
    key = "sk-ant-" + "a1b2c3d4" * 4
    base = {"task": "T", "workdir": str(workdir), "model": "fake"}
    leaky = [{"role": "x", "task": f"use {key}", "mode": "explore"}]
    cases = {
        "no model": ({"task": "T", "workdir": str(workdir)}, "needs a model for its coordinator"),
        "no team": ({**base, "team": "nope"}, "no team named"),
        "no workdir": ({**base, "workdir": str(tmp_path / "gone")}, "workdir does not exist"),
        "empty": ({**base, "task": "  "}, "the task is empty"),
        "secret task": ({**base, "task": f"use {key}"}, "task refused: it contains a credential"),
        "secret plan": ({**base, "plan": leaky}, "role x: task refused: it contains a credential"),
        "bad depends": (
            {**base, "plan": [{**PLAN[0], "depends_on": ["ghost"]}]},
            "'ghost' is not a role of this plan",
        ),
    }
    async with mcp.Client(serve_params(sd_home)) as client:
        for label, (args, needle) in cases.items():
            out = await client.call_tool("swarm", args)
            assert out.is_error, label
            error = payload(out)
            assert error["type"] == "swarmdeck.error", label
            assert needle in error["error"], (label, error)
            assert key not in out.content[0].text
        listed = payload(await client.call_tool("sessions_list", {}))
        assert listed["sessions"] == []  # nothing was started
