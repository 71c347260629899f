"""The optional extras stay out of the processes that do not use them: dispatch's fleet path
(which must start in well under a second) imports neither the MCP SDK nor OpenTelemetry,
nor swarmdeck's integrations, nor the store's and the models' libraries (SQLAlchemy, DBOS, the
LLM SDKs) while it submits and follows a session; `swarmdeck mcp` registers like every other command."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
from swarmdeck.cli import app
app._register(sys.argv[1:])
import swarmdeck.dispatch.drivers, swarmdeck.dispatch.runner, swarmdeck.dispatch.runlog
heavy = ("mcp", "opentelemetry", "swarmdeck.integrations", "swarmdeck.runtime.services",
         "sqlalchemy", "dbos", "openai", "anthropic", "aiohttp", "httpx")
groups = [g.name for g in app.app.registered_groups]
print(json.dumps({"groups": groups, "loaded": sorted(m for m in sys.modules if m.startswith(heavy))}))
"""


def _probe(*argv: str) -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_the_dispatch_fleet_path_imports_no_extra() -> None:
    probe = _probe("dispatch", "--provider", "x")
    assert probe["loaded"] == [] and "mcp" not in probe["groups"]


def test_mcp_is_a_lazily_registered_command() -> None:
    # `swarmdeck mcp ...` imports its module, which registers the group; the SDK itself
    # waits for a server's first use.
    probe = _probe("mcp", "ls")
    assert "mcp" in probe["groups"]
    assert not [m for m in probe["loaded"] if m == "mcp" or m.startswith(("mcp.", "opentelemetry"))]
