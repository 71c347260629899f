"""MCP servers as a session's tools, end to end: a real server written with the SDK, over
stdio and streamable HTTP, called by a durable session through the real OpenAI SDK and the
fake LLM; names, effects and modes, grants, secrets, a server that hangs at start, one that
dies in the middle of a call."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from swarmdeck import AgentSpec, Swarm
from swarmdeck.secrets.store import CredentialStore
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    text,
    tool_results,
)
from tests.integrations.mcp_support import http_server, log_lines, stdio_entry, write_mcp_json

pytest.importorskip("mcp")


@pytest.fixture
async def swarm(sd_home: Path, fake_llm) -> AsyncIterator[Swarm]:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    s = Swarm()
    yield s
    await s.aclose()


def offered(req: FakeRequest) -> list[str]:
    """The tool names a request offered the model."""
    return [t["function"]["name"] for t in req.body.get("tools", [])]


async def test_session_calls_stdio_and_http_servers_with_the_same_tool_name(
    swarm: Swarm, fake_llm, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "mcp.log"
    seen: list[list[str]] = []

    def use_both(req: FakeRequest) -> Reply:
        seen.append(offered(req))
        return calls(
            call("alpha__echo", text="hi"),
            call("web__echo", text="there"),
            call("alpha__add", a=2, b=40),
        )

    def report(req: FakeRequest) -> Reply:
        return text(" | ".join(tool_results(req)))

    fake_llm.set_script(Scripted({"use mcp": Agent([use_both, report])}))
    with http_server("web", log) as url:
        write_mcp_json(
            workdir,
            {
                "alpha": stdio_entry("alpha", log, default=True),
                "web": {"url": url, "default": True, "effects": {"echo": "read"}},
                "offstage": stdio_entry("offstage", log),  # not default, not granted
            },
        )
        session = await swarm.start("use mcp", AgentSpec("fake", mode="code"), workdir=workdir)
        result = await session.result(timeout=60)
    assert result.status == "completed", result
    assert result.text == "alpha says hi | web says there | 42"
    tools = seen[0]
    assert {"alpha__echo", "web__echo", "alpha__add", "web__record"} <= set(tools)
    assert not [t for t in tools if t.startswith("offstage__")]
    # The same tool name on two servers is two tools; each server started once.
    assert log_lines(log).count("alpha:started") == 1
    assert "offstage:started" not in log_lines(log)


async def test_read_only_mode_gets_only_read_tools(
    swarm: Swarm, fake_llm, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "mcp.log"
    seen: list[list[str]] = []

    def look(req: FakeRequest) -> Reply:
        seen.append(offered(req))
        return calls(call("alpha__record", text="sneaky"))

    fake_llm.set_script(Scripted({"look only": Agent([look, text("done")])}))
    write_mcp_json(
        workdir,
        {"alpha": stdio_entry("alpha", log, default=True, effects={"echo": "read"})},
    )
    session = await swarm.start("look only", AgentSpec("fake", mode="explore"), workdir=workdir)
    result = await session.result(timeout=60)
    assert result.status == "completed"
    mcp_tools = [t for t in seen[0] if "__" in t]
    assert mcp_tools == ["alpha__echo"], mcp_tools  # the rest default to `once`
    [outcome] = [e for e in session.transcript() if e.kind == "tool_result"]
    assert (
        outcome.payload["is_error"] and "no tool named alpha__record" in outcome.payload["content"]
    )
    assert not any("sneaky" in line for line in log_lines(log))


async def test_a_hung_server_is_reported_and_the_session_goes_on(
    swarm: Swarm, fake_llm, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "mcp.log"
    fake_llm.set_script(
        Scripted({"carry on": Agent([calls(call("alpha__echo", text="still here")), text("ok")])})
    )
    write_mcp_json(
        workdir,
        {
            "alpha": stdio_entry("alpha", log, default=True),
            "stuck": stdio_entry("stuck", log, "--hang", default=True, startupTimeout=1),
        },
    )
    started = time.monotonic()
    session = await swarm.start("carry on", AgentSpec("fake", mode="code"), workdir=workdir)
    result = await session.result(timeout=60)
    assert result.status == "completed"
    assert time.monotonic() - started < 20
    events = session.transcript()
    notices = [e.payload["text"] for e in events if e.kind == "notice"]
    assert notices == [
        f"MCP server stuck did not start within 1s (raise `startupTimeout` in "
        f"{workdir / '.mcp.json'} if it is slow); going on without it"
    ]
    [res] = [e.payload for e in events if e.kind == "tool_result"]
    assert res["content"] == "alpha says still here" and not res["is_error"]
    # Not retried at every turn: the failure stands for a while.
    assert log_lines(log).count("stuck:started") == 1


async def test_a_server_that_dies_mid_call_fails_that_call_and_restarts(
    swarm: Swarm, fake_llm, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "mcp.log"
    fake_llm.set_script(
        Scripted(
            {
                "crash it": Agent(
                    [
                        calls(call("alpha__crash", text="boom")),
                        calls(call("alpha__echo", text="again")),
                        text("recovered"),
                    ]
                )
            }
        )
    )
    write_mcp_json(workdir, {"alpha": stdio_entry("alpha", log, default=True)})
    session = await swarm.start("crash it", AgentSpec("fake", mode="code"), workdir=workdir)
    result = await session.result(timeout=60)
    assert result.status == "completed" and result.text == "recovered"
    crashed, again = [e.payload for e in session.transcript() if e.kind == "tool_result"]
    assert crashed["is_error"]
    assert crashed["content"] == (
        "error: the MCP server alpha stopped during the call to crash; it is started again "
        "on the next call (check what the call did before repeating it)"
    )
    assert again["content"] == "alpha says again" and not again["is_error"]
    assert log_lines(log) == ["alpha:started", "alpha:crash boom", "alpha:started"]


async def test_grants_by_front_matter_and_keys_resolved_for_the_server_only(
    swarm: Swarm, fake_llm, workdir: Path, tmp_path: Path, sd_home: Path, monkeypatch
) -> None:
    log = tmp_path / "mcp.log"
    secret = "mcp-token-0123456789abcdef"
    CredentialStore(sd_home / "credentials").set("mcptok", secret)
    # A provider key in this process's environment must never reach a server.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-provider-key-never-passed-0000")
    seen: list[list[str]] = []

    def ask_env(req: FakeRequest) -> Reply:
        seen.append(offered(req))
        return calls(
            call("beta__env", variable="TOKEN"),
            call("beta__env", variable="OPENAI_API_KEY"),
        )

    fake_llm.set_script(Scripted({"check env": Agent([ask_env, text("done")])}))
    write_mcp_json(
        workdir / ".swarmdeck",
        {
            "alpha": stdio_entry("alpha", log, default=True),
            "beta": stdio_entry("beta", log, env={"TOKEN": "${key:mcptok}"}),
        },
    )
    agents = workdir / ".swarmdeck" / "agents"
    agents.mkdir(parents=True)
    (agents / "envy.agent.md").write_text(
        "---\nname: envy\ndescription: reads env\nmcpServers: [beta]\n---\nRead env.\n"
    )
    session = await swarm.start(
        "check env", AgentSpec("fake", agent="envy", mode="code"), workdir=workdir
    )
    result = await session.result(timeout=60)
    assert result.status == "completed"
    names = [t for t in seen[0] if "__" in t]
    assert names and all(n.startswith("beta__") for n in names), names
    token, provider = [e.payload for e in session.transcript() if e.kind == "tool_result"]
    # The server saw the key (the call answered something), the transcript only its mask.
    assert token["content"] and secret not in token["content"]
    assert provider["content"] == ""
    stored = json.dumps([e.payload for e in session.transcript()])
    assert secret not in stored
    assert "alpha:started" not in log_lines(log)
