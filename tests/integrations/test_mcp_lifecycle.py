"""The MCP servers a session starts, as processes: where they run (the session's workdir),
how they start (all at once), and that none outlives the command that started it, on any
path out (a normal end, a server that missed its start-up timeout, SIGTERM).

Real `swarmdeck dispatch` processes, real stdio servers (tests/mcp_servers.py) that write
their pid and working directory to a folder, the fake LLM through the OpenAI SDK."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from tests.conftest import cli_env, run_cli, write_provider
from tests.integration.test_sessions_support import wait_for
from tests.integrations.mcp_support import stdio_entry, write_mcp_json

pytest.importorskip("mcp")

EXPLORE = RESULT_EXAMPLES["explore"][0]


def script(request: FakeRequest) -> Reply:
    """Echo through the `alpha` server, then submit; a SLOW task thinks for a minute."""
    if "SLOW" in request.task:
        return Reply(text="thinking", delay=60)
    if request.turn == 0:
        return Reply(text="Asking.", tool_calls=(ReplyToolCall("alpha__echo", {"text": "hi"}),))
    return Reply(text="Done.", tool_calls=(ReplyToolCall("submit_result", {"result": EXPLORE}),))


@pytest.fixture
def fake(sd_home: Path):
    with FakeLLM(script) as server:
        write_provider(sd_home, "fake", server.openai_base_url)
        yield server


@pytest.fixture
def pids(tmp_path: Path):
    """The folder the servers write their pids to; any server still alive at the end is
    killed (a failing test must not leave processes behind)."""
    folder = tmp_path / "pids"
    folder.mkdir()
    yield folder
    for pid in server_pids(folder).values():
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def server_pids(folder: Path) -> dict[str, int]:
    """NAME.PID files as {NAME.PID: the server's pid as this host sees it, -1 when gone}.
    A server runs in a pid namespace of its own (integrations/mcp/shield.py), so the pid it
    writes is its own namespace's: its process is found here by its command line and by
    the folder in its environment."""
    return {p.name: _host_pid(p.name.rsplit(".", 1)[0], folder) for p in folder.iterdir()}


def _host_pid(name: str, folder: Path) -> int:
    wanted = f"MCP_TEST_PIDS={folder}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        server = b"tests.mcp_servers" in argv and name.encode() in argv
        if server and not argv[0].endswith(b"bwrap") and wanted in environ:
            return int(entry.name)
    return -1


def alive(pid: int) -> bool:
    """True while the process runs (a zombie, waiting to be reaped, has ended)."""
    if pid < 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def servers(log: Path, pids: Path, stuck_timeout: float) -> dict[str, dict[str, Any]]:
    """A working server and one that never answers its handshake."""
    env = {"MCP_TEST_PIDS": str(pids)}
    return {
        "alpha": stdio_entry("alpha", log, default=True, effect="read", env=env),
        "stuck": stdio_entry(
            "stuck", log, "--hang", default=True, startupTimeout=stuck_timeout, env=env
        ),
    }


def dispatch_args(workdir: Path, task: str) -> list[str]:
    return [
        "dispatch",
        "--provider",
        "fake",
        "--mode",
        "explore",
        "-C",
        str(workdir),
        "--task",
        task,
    ]


def test_no_server_outlives_dispatch_and_each_runs_in_the_workdir(
    sd_home: Path, workdir: Path, tmp_path: Path, fake: FakeLLM, pids: Path, monkeypatch
) -> None:
    write_mcp_json(workdir, servers(tmp_path / "mcp.log", pids, stuck_timeout=1))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the caller is not in the workdir
    res = run_cli(sd_home, *dispatch_args(workdir, "what does main return?"), timeout=120)
    assert res.code == 0, res.stderr
    verdict = json.loads(res.stdout.splitlines()[1])
    assert verdict["verdict"] == "completed", verdict
    started = server_pids(pids)
    assert sorted(name.split(".")[0] for name in started) == ["alpha", "stuck"]
    # The hung server was left running after dispatch exited (5 of 5 sessions).
    assert [name for name, pid in started.items() if alive(pid)] == []
    # Each ran in the session's workdir, not the caller's directory.
    assert {(pids / name).read_text() for name in started} == {str(workdir)}
    # The start-up timeout is said once, in our words (it was also a raw Python log line).
    said = "MCP server stuck did not start within 1s"
    assert res.stderr.count(said) == 1, res.stderr


def test_sigterm_ends_the_servers_too(
    sd_home: Path, workdir: Path, tmp_path: Path, fake: FakeLLM, pids: Path
) -> None:
    # The signal comes while `stuck` is still starting (the session's first turn waits for
    # its servers).
    write_mcp_json(workdir, servers(tmp_path / "mcp.log", pids, stuck_timeout=60))
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", *dispatch_args(workdir, "SLOW thinking")],
        env=cli_env(sd_home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: len(server_pids(pids)) == 2, timeout=60, what="both servers started")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0 and len(out.splitlines()) == 2, (out, err)
    left = [name for name, pid in server_pids(pids).items() if alive(pid)]
    assert left == [], err
    assert "Traceback" not in err, err


def test_servers_start_at_once(tmp_path: Path, workdir: Path, pids: Path) -> None:
    """Three servers that never answer and one that works: the session waits for the
    slowest start-up timeout, not their sum, and each failure is told apart."""
    import asyncio

    from swarmdeck.integrations.mcp.toolset import McpPool, McpToolset
    from swarmdeck.tools.toolsets import SessionScope

    log = tmp_path / "mcp.log"
    env = {"MCP_TEST_PIDS": str(pids)}
    hung = {
        f"dead{i}": stdio_entry(f"dead{i}", log, "--hang", default=True, startupTimeout=4, env=env)
        for i in range(3)
    }
    alpha = stdio_entry("alpha", log, default=True, effect="read", env=env)
    write_mcp_json(workdir, {**hung, "alpha": alpha})
    toolset = McpToolset(McpPool(lambda _name: None, tmp_path / "logs"))
    scope = SessionScope("s1", "explore", workdir, {})

    async def timed() -> tuple[float, Any]:
        began = time.monotonic()
        found = await toolset.tools_for(scope)
        took = time.monotonic() - began
        await toolset.close()
        return took, found

    took, found = asyncio.run(timed())
    # One after another took at least 3 x 4 s; at once, 4 s and the working one's start
    # and close (a Python process importing the MCP SDK: seconds on a loaded machine).
    assert took < 10.0, took
    assert {t.name for t in found.tools} >= {"alpha__echo", "alpha__add"}
    texts = sorted(text for _key, text in found.notices)
    assert [t.split(" did not start")[0] for t in texts] == [
        "MCP server dead0",
        "MCP server dead1",
        "MCP server dead2",
    ]
    assert [name for name, pid in server_pids(pids).items() if alive(pid)] == []
