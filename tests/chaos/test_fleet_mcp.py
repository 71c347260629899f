"""MCP tools on the fleet survive a worker's death: SIGKILL the worker while a `once` MCP
tool runs; the worker on another host takes the session over, does not run the call again
(the model is told it was interrupted), starts the server itself and the session ends with
its tools working."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.runtime.host import Host, SessionRequest
from tests.conftest import Store, write_provider
from tests.integration.test_fleet_support import Fleet
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    open_catalog,
    text,
    wait_for,
)
from tests.integrations.mcp_support import log_lines, stdio_entry, write_mcp_json

pytest.importorskip("mcp")
pytestmark = [pytest.mark.chaos, pytest.mark.fleet]

TASK = "cut the mcp call"


def test_a_once_mcp_call_cut_with_its_worker_is_not_rerun_by_the_heir(
    store: Store, sd_home: Path, workdir: Path, fake_llm, fleet: Fleet, tmp_path: Path
) -> None:
    log = tmp_path / "mcp.log"
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    entry = stdio_entry("alpha", log, default=True, effects={"echo": "read"}, callTimeout=300)
    write_mcp_json(workdir, {"alpha": entry})
    fake_llm.set_script(
        Scripted(
            {
                TASK: Agent(
                    [
                        calls(call("alpha__echo", text="first")),
                        calls(call("alpha__slow", text="side effect", seconds=200)),
                        calls(call("alpha__echo", text="after")),
                        text("finished after the takeover"),
                    ]
                )
            }
        )
    )
    doomed = fleet.start("host-a")
    sid = Host().create_session(SessionRequest(TASK, "fake", workdir), fleet=True).id
    catalog = open_catalog()
    wait_for(lambda: "alpha:side effect" in log_lines(log), timeout=60, what="the once call")
    assert catalog.get_session(sid).executor == doomed.executor_id
    heir = fleet.start("host-b")
    fleet.kill(doomed)

    wait_for(lambda: catalog.get_session(sid).status == "completed", timeout=90, what="the end")
    record = catalog.get_session(sid)
    assert (record.executor, record.final_text) == (heir.executor_id, "finished after the takeover")
    # The `once` call ran once; the finished `read` one was not repeated; the heir started
    # the server for itself and its next call worked.
    assert log_lines(log) == ["alpha:started", "alpha:side effect", "alpha:started"]
    results = [e.payload for e in catalog.events(sid) if e.kind == "tool_result"]
    assert [r["name"] for r in results] == ["alpha__echo", "alpha__slow", "alpha__echo"]
    assert results[0]["content"] == "alpha says first"
    assert results[1]["is_error"] and results[1]["content"].startswith("interrupted")
    assert results[2]["content"] == "alpha says after" and not results[2]["is_error"]
    keys = [e.key for e in catalog.events(sid)]
    assert len(keys) == len(set(keys)), keys
