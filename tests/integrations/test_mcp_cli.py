"""`swarmdeck mcp ls` and `mcp show` (a real server started and listed), and `key set --mcp`
for the keys `.mcp.json` files refer to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.integration.test_dispatch_modes import invoke
from tests.integrations.mcp_support import stdio_entry, write_mcp_json

pytest.importorskip("mcp")


def test_ls_and_show(sd_home: Path, workdir: Path, tmp_path: Path) -> None:
    log = tmp_path / "mcp.log"
    write_mcp_json(
        workdir,
        {
            "alpha": stdio_entry("alpha", log, default=True, effects={"echo": "read"}),
            "bad__one": {"command": "x"},
        },
    )
    listed = invoke(sd_home, "mcp", "ls", "-C", str(workdir), "--json")
    assert listed.code == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assert [s["name"] for s in doc["servers"]] == ["alpha"]
    assert doc["servers"][0]["default"] is True and doc["servers"][0]["transport"] == "stdio"
    assert len(doc["problems"]) == 1 and "bad__one" in doc["problems"][0]
    shown = invoke(sd_home, "mcp", "show", "alpha", "-C", str(workdir), "--json")
    assert shown.code == 0, shown.stderr
    tools = {t["name"]: t for t in json.loads(shown.stdout)["tools"]}
    assert tools["alpha__echo"]["effect"] == "read" and tools["alpha__echo"]["read_only_modes"]
    assert tools["alpha__record"]["effect"] == "once"
    assert not tools["alpha__record"]["read_only_modes"]
    missing = invoke(sd_home, "mcp", "show", "nope", "-C", str(workdir))
    assert missing.code == 2 and "no MCP server named nope" in missing.stderr


def test_key_set_for_mcp(sd_home: Path) -> None:
    refused = run_cli(sd_home, "key", "set", "github", stdin_text="ghp_x\n")
    assert refused.code == 2 and "github" in refused.stderr
    stored = run_cli(sd_home, "key", "set", "github", "--mcp", stdin_text="ghp_x\n")
    assert stored.code == 0, stored.stderr
    assert (sd_home / "credentials" / "github.key").is_file()
