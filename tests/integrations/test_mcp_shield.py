"""An MCP server cannot read swarmdeck's home, whatever the sandbox setting (issue 30, item 1
for tools, carried to MCP servers): a real stdio server, asked by the model to read the
credential store, finds nothing there; it still reads the project and reaches the net."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck import AgentSpec, Swarm
from swarmdeck.secrets.store import CredentialStore
from swarmdeck.tools.sandbox import detect_sandbox
from tests.conftest import write_provider
from tests.integration.test_sessions_support import Agent, Scripted, call, calls, text, tool_results
from tests.integrations.mcp_support import stdio_entry, write_mcp_json

pytest.importorskip("mcp")
KEY = "sk-shield-test-0123456789abcdefghijkl"


@pytest.mark.parametrize("setting", ["auto", "off"])
async def test_a_server_cannot_read_the_credential_store(
    setting: str, sd_home: Path, workdir: Path, fake_llm, tmp_path: Path
) -> None:
    if detect_sandbox().kind == "none":
        pytest.skip("neither bubblewrap nor Landlock works here")
    if setting == "off":
        (sd_home / "settings.yaml").write_text("sandbox: off\n")
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    CredentialStore(sd_home / "credentials").set("openai", KEY)
    keyfiles = sorted((sd_home / "credentials").iterdir())
    assert keyfiles and KEY in keyfiles[0].read_text()  # the file the server is sent to
    (workdir / "notes.txt").write_text("project notes\n")
    write_mcp_json(workdir, {"alpha": stdio_entry("alpha", tmp_path / "mcp.log", default=True)})
    ask = calls(
        call("alpha__read", path=str(keyfiles[0])),
        call("alpha__read", path=str(workdir / "notes.txt")),
    )
    fake_llm.set_script(
        Scripted({"read them": Agent([ask, lambda r: text(" | ".join(tool_results(r)))])})
    )
    async with Swarm() as swarm:
        session = await swarm.start("read them", AgentSpec("fake", mode="code"), workdir=workdir)
        result = await session.result(timeout=60)
    assert result.status == "completed", result
    secret, notes = result.text.split(" | ")
    assert KEY not in result.text and secret.startswith("cannot read")
    assert notes == "project notes\n"
