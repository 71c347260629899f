"""`swarmdeck mcp serve` driven by the MCP SDK's own client over stdio, as a planner host
runs it: dispatch a scripted task, wait, read the verdict; fanout; the session tools; a
refusal is the contract's error object."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.script import Script
from tests.conftest import write_provider
from tests.integrations.mcp_support import payload, serve_params

mcp = pytest.importorskip("mcp")

EXPLORE = RESULT_EXAMPLES["explore"][0]
SCRIPT = {
    "scenarios": [
        {"match": "SLOW", "turns": [{"text": "Looking.", "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}, {"text": "hmm", "delay": 60}]},
        {
            "turns": [
                {"text": "Looking.", "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]},
                {"text": "Done.", "tool_calls": [{"name": "submit_result", "arguments": {"result": EXPLORE}}]},
            ]
        },
    ]
}  # fmt: skip


async def test_dispatch_wait_and_read_the_verdict(sd_home: Path, workdir: Path, fake_llm) -> None:
    fake_llm.set_script(Script.from_dict(SCRIPT))
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    async with mcp.Client(serve_params(sd_home)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {
            "dispatch", "fanout", "swarm", "session_wait", "sessions_list", "session_show",
            "session_send", "session_answer", "session_cancel", "artifact_get", "list_models",
        }  # fmt: skip
        job = {
            "provider": "fake",
            "mode": "explore",
            "task": "Where is main?",
            "workdir": str(workdir),
        }
        started = payload(await client.call_tool("dispatch", {"job": job}))
        assert started["type"] == "swarmdeck.started" and started["mode"] == "explore"
        sid = started["session_id"]
        verdict = payload(
            await client.call_tool("session_wait", {"session_id": sid, "timeout": 90})
        )
        assert verdict["type"] == "swarmdeck.verdict"
        assert (verdict["verdict"], verdict["parse_state"]) == ("completed", "parsed")
        assert verdict["session_id"] == sid and verdict["result"] == EXPLORE
        assert verdict["tokens"]["input"] > 0

        shown = payload(
            await client.call_tool("session_show", {"session_id": sid[:8], "events": 2})
        )
        assert shown["id"] == sid and shown["status"] == "completed"
        assert len(shown["events"]) == 2 and shown["events_total"] > 2
        # The same document as `sessions show --json`: the last prompt against the window.
        assert 0 < shown["context"]["prompt_tokens"] < shown["context"]["window"]
        assert "cache_share" in shown["usage"]
        listed = payload(await client.call_tool("sessions_list", {"limit": 5}))
        assert [s["id"] for s in listed["sessions"]] == [sid]
        models = payload(await client.call_tool("list_models", {}))
        assert "fake:scripted" in [m["name"] for m in models["models"]]

        # A bad job is refused with the contract's error object, nothing started.
        bad = await client.call_tool("dispatch", {"job": {**job, "provider": "nope"}})
        assert bad.is_error
        error = payload(bad)
        assert error["type"] == "swarmdeck.error" and "unknown provider 'nope'" in error["error"]
        gone = await client.call_tool("session_wait", {"session_id": "zzz", "timeout": 1})
        assert gone.is_error and payload(gone)["error"] == "no session zzz"
    # A server started later still finds the verdict (written beside the run's log).
    async with mcp.Client(serve_params(sd_home)) as client:
        again = payload(await client.call_tool("session_wait", {"session_id": sid, "timeout": 5}))
        assert again == verdict


async def test_fanout_answers_at_once_and_sessions_take_messages(
    sd_home: Path, workdir: Path, fake_llm, tmp_path: Path
) -> None:
    fake_llm.set_script(Script.from_dict(SCRIPT))
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    other = tmp_path / "other"
    other.mkdir()
    (other / "app.py").write_text("print(1)\n")
    async with mcp.Client(serve_params(sd_home)) as client:
        jobs = [
            {"provider": "fake", "mode": "explore", "task": "one", "workdir": str(workdir), "name": "a"},
            {"provider": "fake", "mode": "review", "task": "SLOW one", "workdir": str(other), "name": "b"},
        ]  # fmt: skip
        out = payload(await client.call_tool("fanout", {"jobs": jobs}))
        a, b = out["started"]
        assert (a["job"], b["job"]) == ("a", "b")
        assert a["session_id"] != b["session_id"]
        first = payload(
            await client.call_tool("session_wait", {"session_id": a["session_id"], "timeout": 90})
        )
        assert first["verdict"] == "completed" and first["job"] == "a"
        # b is slow: still running when a short wait ends.
        pending = payload(
            await client.call_tool("session_wait", {"session_id": b["session_id"], "timeout": 0.5})
        )
        assert pending["type"] == "swarmdeck.pending" and pending["session_id"] == b["session_id"]
        assert pending["status"] in ("pending", "running")
        sent = payload(
            await client.call_tool(
                "session_send", {"session_id": b["session_id"], "text": "hurry", "msg_id": "m1"}
            )
        )
        assert sent == {"session_id": b["session_id"], "delivered": True, "duplicate": False}
        again = payload(
            await client.call_tool(
                "session_send", {"session_id": b["session_id"], "text": "hurry", "msg_id": "m1"}
            )
        )
        assert again["duplicate"] is True
        not_asked = await client.call_tool(
            "session_answer", {"session_id": b["session_id"], "text": "yes"}
        )
        assert not_asked.is_error and "is not waiting for an answer" in payload(not_asked)["error"]
        cancelled = payload(
            await client.call_tool("session_cancel", {"session_id": b["session_id"]})
        )
        assert b["session_id"] in cancelled["cancelled"]
        second = payload(
            await client.call_tool("session_wait", {"session_id": b["session_id"], "timeout": 90})
        )
        assert second["type"] == "swarmdeck.verdict" and second["job"] == "b"
        assert second["verdict"] != "completed"
        shown = payload(await client.call_tool("session_show", {"session_id": b["session_id"]}))
        assert shown["status"] == "cancelled"
        # Ended: a message is refused with the contract's error object.
        refused = await client.call_tool(
            "session_send", {"session_id": b["session_id"], "text": "more"}
        )
        assert refused.is_error and "has ended" in payload(refused)["error"]
        empty = await client.call_tool("session_send", {"session_id": a["session_id"], "text": " "})
        assert empty.is_error and "empty" in payload(empty)["error"]


async def test_two_code_jobs_on_one_workdir_are_refused(
    sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    async with mcp.Client(serve_params(sd_home)) as client:
        job = {"provider": "fake", "mode": "code", "task": "x", "workdir": str(workdir)}
        refused = await client.call_tool("fanout", {"jobs": [job, job]})
        assert refused.is_error
        assert "2 code jobs would write to" in payload(refused)["error"]
    assert not fake_llm.requests
    assert not os.listdir(sd_home / "runs") if (sd_home / "runs").exists() else True


async def test_arguments_that_fail_the_schema_are_the_contracts_error(
    sd_home: Path, workdir: Path
) -> None:
    """A bad mode or a missing task: the `swarmdeck.error` object naming the field, not the
    SDK's validation text; nothing is started."""
    job = {"provider": "fake", "mode": "explore", "task": "t", "workdir": str(workdir)}
    async with mcp.Client(serve_params(sd_home)) as client:
        cases = {
            "job.mode": ("dispatch", {"job": {**job, "mode": "write"}}),
            "job.task": ("dispatch", {"job": {k: v for k, v in job.items() if k != "task"}}),
            "jobs.0.mode": ("fanout", {"jobs": [{**job, "mode": "write"}]}),
            "task": ("swarm", {"workdir": str(workdir)}),
        }
        for field, (tool, args) in cases.items():
            refused = await client.call_tool(tool, args)
            assert refused.is_error, (tool, args)
            error = payload(refused)
            assert set(error) == {"type", "schema_version", "error", "hint"}, error
            assert error["type"] == "swarmdeck.error", error
            assert error["error"].startswith(f"invalid arguments for {tool}: {field}"), error
            assert "pydantic" not in error["error"] and "Error executing" not in error["error"]
        listed = payload(await client.call_tool("sessions_list", {}))
        assert listed["sessions"] == []
