"""`swarmdeck init claude|codex` registers `swarmdeck mcp serve` in the host's MCP
configuration, idempotently and keeping everything else; the entry it writes starts a
server the SDK's client talks to; `uninstall` removes exactly that entry."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from tests.integration.test_dispatch_modes import invoke

mcp = pytest.importorskip("mcp")

OTHER = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"]}
CODEX_CONFIG = """# my codex settings
model = "o4-mini"

[mcp_servers.other]
command = "other-server"
args = ["--flag"]

[profiles.fast]
model = "gpt-5-mini"
"""


async def test_claude_config_starts_the_server(sd_home: Path, tmp_path: Path) -> None:
    target = tmp_path / "proj" / ".claude"
    config = tmp_path / "proj" / ".mcp.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"mcpServers": {"github": OTHER}}))
    first = invoke(sd_home, "init", "claude", "--target", str(target))
    assert first.code == 0, first.stderr
    assert f"registered `swarmdeck mcp serve` in {config}" in first.stdout
    again = invoke(sd_home, "init", "claude", "--target", str(target))
    assert f"already registered `swarmdeck mcp serve` in {config}" in again.stdout
    doc = json.loads(config.read_text())
    assert doc["mcpServers"]["github"] == OTHER
    entry = doc["mcpServers"]["swarmdeck"]
    assert entry["type"] == "stdio" and entry["args"][-2:] == ["mcp", "serve"]
    assert entry["env"] == {"SWARMDECK_HOME": str(sd_home.resolve())}

    # What Claude Code would start, as it would start it.
    params = mcp.StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env={**entry["env"], "PATH": os.environ["PATH"]},
    )
    async with mcp.Client(params) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"dispatch", "session_wait", "list_models"} <= names
        listed = await client.call_tool("sessions_list", {})
        assert json.loads(listed.content[0].text) == {"sessions": []}

    gone = invoke(sd_home, "uninstall", "claude", "--target", str(target))
    assert gone.code == 0 and f"removed the swarmdeck MCP server from {config}" in gone.stdout
    assert json.loads(config.read_text()) == {"mcpServers": {"github": OTHER}}
    assert (
        "MCP server" not in invoke(sd_home, "uninstall", "claude", "--target", str(target)).stdout
    )


def test_a_project_file_init_made_alone_goes_with_uninstall(sd_home: Path, tmp_path: Path) -> None:
    target = tmp_path / "p" / ".claude"
    assert invoke(sd_home, "init", "claude", "--target", str(target)).code == 0
    config = tmp_path / "p" / ".mcp.json"
    assert list(json.loads(config.read_text())["mcpServers"]) == ["swarmdeck"]
    assert config.stat().st_mode & 0o777 == 0o600
    assert invoke(sd_home, "uninstall", "claude", "--target", str(target)).code == 0
    assert not config.exists()


def test_codex_config_keeps_the_rest_of_the_file(sd_home: Path, tmp_path: Path) -> None:
    target = tmp_path / "codex"
    target.mkdir()
    config = target / "config.toml"
    config.write_text(CODEX_CONFIG)
    assert invoke(sd_home, "init", "codex", "--target", str(target)).code == 0
    written = config.read_text()
    again = invoke(sd_home, "init", "codex", "--target", str(target))
    assert "already registered" in again.stdout and config.read_text() == written
    doc = tomllib.loads(written)
    assert doc["model"] == "o4-mini" and doc["profiles"]["fast"]["model"] == "gpt-5-mini"
    assert doc["mcp_servers"]["other"] == {"command": "other-server", "args": ["--flag"]}
    ours = doc["mcp_servers"]["swarmdeck"]
    assert ours["args"][-2:] == ["mcp", "serve"]
    assert ours["env"] == {"SWARMDECK_HOME": str(sd_home.resolve())}
    assert Path(ours["command"]).name in ("swarmdeck", "python", "python3")
    assert invoke(sd_home, "uninstall", "codex", "--target", str(target)).code == 0
    assert config.read_text() == CODEX_CONFIG


def test_a_broken_host_config_is_refused_in_one_line(sd_home: Path, tmp_path: Path) -> None:
    target = tmp_path / "q" / ".claude"
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / ".mcp.json").write_text("{not json")
    res = invoke(sd_home, "init", "claude", "--target", str(target))
    assert res.code == 2
    [line] = res.stderr.strip().splitlines()
    assert line.startswith("swarmdeck: error: ") and "is not valid JSON" in line
    assert (tmp_path / "q" / ".mcp.json").read_text() == "{not json"
    skipped = invoke(sd_home, "init", "claude", "--target", str(target), "--no-mcp")
    assert skipped.code == 0 and "mcp serve" not in skipped.stdout
