"""MCP on the fleet: a session a worker runs has its project's MCP servers as tools, the
same as in-process (the worker reads the .mcp.json of the session's workdir and starts the
server itself), and `swarmdeck mcp serve`'s dispatch hands its task to the fleet the way
`swarmdeck dispatch` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import write_provider
from tests.integration.test_fleet_support import Fleet
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    open_catalog,
    tool_results,
)
from tests.integrations.mcp_support import (
    log_lines,
    payload,
    serve_params,
    stdio_entry,
    write_mcp_json,
)

mcp = pytest.importorskip("mcp")

pytestmark = pytest.mark.fleet

EXPLORE = RESULT_EXAMPLES["explore"][0]


async def test_mcp_serve_dispatch_runs_on_a_worker_with_the_projects_mcp_tools(
    sd_home: Path, workdir: Path, fake_llm, fleet: Fleet, tmp_path: Path
) -> None:
    log = tmp_path / "mcp.log"
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    write_mcp_json(
        workdir, {"alpha": stdio_entry("alpha", log, default=True, effects={"echo": "read"})}
    )
    seen: list[list[str]] = []

    def use_it(req: FakeRequest) -> Reply:
        seen.append([t["function"]["name"] for t in req.body.get("tools", [])])
        return calls(call("alpha__echo", text="from the fleet"))

    def submit(req: FakeRequest) -> Reply:
        assert tool_results(req)[-1] == "alpha says from the fleet"
        return calls(call("submit_result", result=EXPLORE))

    fake_llm.set_script(Scripted({"ask the mcp tool": Agent([use_it, submit])}))
    worker = fleet.start("host-a")
    async with mcp.Client(serve_params(sd_home)) as client:
        job = {
            "provider": "fake",
            "mode": "explore",
            "task": "ask the mcp tool where main is",
            "workdir": str(workdir),
        }
        started = payload(await client.call_tool("dispatch", {"job": job}))
        sid = started["session_id"]
        verdict = payload(
            await client.call_tool("session_wait", {"session_id": sid, "timeout": 120})
        )
    assert (verdict["verdict"], verdict["result"]) == ("completed", EXPLORE), verdict
    # The worker ran it (the hand-over), and offered the server's read tool in explore mode.
    assert open_catalog().get_session(sid).executor == worker.executor_id
    assert "alpha__echo" in seen[0] and "alpha__record" not in seen[0]
    # The worker started the server once, for this session.
    assert log_lines(log) == ["alpha:started"]
