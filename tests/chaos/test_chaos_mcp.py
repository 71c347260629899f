"""SIGKILL a worker while a `once` MCP tool runs; resume: the call is not run again (the
model is told it was interrupted), a `read` one that had finished is not repeated either,
and the session ends with the server's tools working in the new process."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from swarmdeck.catalog.catalog import Catalog
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import popen_cli
from tests.integrations.mcp_support import log_lines, stdio_entry, write_mcp_json

pytest.importorskip("mcp")
pytestmark = pytest.mark.chaos


def _script() -> dict:
    return {
        "scenarios": [
            {
                "turns": [
                    {"tool_calls": [{"name": "alpha__echo", "arguments": {"text": "first"}}]},
                    {
                        "tool_calls": [
                            {
                                "name": "alpha__slow",
                                "arguments": {"text": "side effect", "seconds": 60},
                            }
                        ]
                    },
                    {"tool_calls": [{"name": "alpha__echo", "arguments": {"text": "after"}}]},
                    {"text": "finished after the interruption"},
                ]
            }
        ]
    }


def _wait_for_line(log: Path, line: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while line not in log_lines(log):
        if time.monotonic() > deadline:
            raise AssertionError(f"{line!r} never recorded: {log_lines(log)}")
        time.sleep(0.02)


def test_once_mcp_tool_cut_by_sigkill_is_not_rerun(
    store: Store, sd_home: Path, workdir: Path, fake_llm, tmp_path: Path
) -> None:
    log = tmp_path / "mcp.log"
    fake_llm.set_script(_script())
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    write_mcp_json(
        workdir, {"alpha": stdio_entry("alpha", log, default=True, effects={"echo": "read"})}
    )
    proc = popen_cli(sd_home, "run", "go", "-m", "fake", "-C", str(workdir), "--mode", "code")
    _wait_for_line(log, "alpha:side effect")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    assert len(fake_llm.requests) == 2

    catalog = Catalog.open(store.url)
    try:
        [session] = catalog.list_sessions()
        res = run_cli(sd_home, "sessions", "resume", session.id, timeout=120)
        assert res.code == 0, res.stderr
        assert res.stdout.strip() == "finished after the interruption"
        # The `once` call ran once; the finished `read` one was not repeated; the server
        # started again in the resuming process and answered the next call.
        assert log_lines(log) == [
            "alpha:started",
            "alpha:side effect",
            "alpha:started",
        ]
        results = [e.payload for e in catalog.events(session.id) if e.kind == "tool_result"]
        assert [r["name"] for r in results] == ["alpha__echo", "alpha__slow", "alpha__echo"]
        assert results[0]["content"] == "alpha says first"
        assert results[1]["is_error"] and results[1]["content"].startswith("interrupted")
        assert results[2]["content"] == "alpha says after"
        assert catalog.get_session(session.id).status == "completed"
        assert len(fake_llm.requests) == 4
    finally:
        catalog.engine.dispose()
