"""Helpers of the MCP tests: `.mcp.json` entries that start the test server
(tests/mcp_servers.py), a free loopback port, an HTTP server process, the parameters that
start `swarmdeck mcp serve` for the SDK's client. Holds no tests."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import cli_env

SERVER_SCRIPT = Path(__file__).resolve().parent.parent / "mcp_servers.py"


def stdio_entry(name: str, log: Path, *extra_args: str, **fields: Any) -> dict[str, Any]:
    """A stdio entry that runs the test server as `name`, recording into `log`."""
    env = {"MCP_TEST_LOG": str(log), **fields.pop("env", {})}
    return {
        "command": sys.executable,
        "args": [str(SERVER_SCRIPT), name, *extra_args],
        "env": env,
        **fields,
    }


def write_mcp_json(folder: Path, servers: dict[str, dict[str, Any]]) -> Path:
    """`folder/.mcp.json` declaring these servers, `eager` unless an entry says otherwise:
    these tests read what a session is offered from the tools its requests carry
    (tests/integration/test_lazy_tools.py checks the index of servers that are not)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ".mcp.json"
    eager = {name: {"eager": True, **entry} for name, entry in servers.items()}
    path.write_text(json.dumps({"mcpServers": eager}, indent=2))
    return path


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def http_server(name: str, log: Path) -> Iterator[str]:
    """The test server over streamable HTTP on loopback; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), name, "--http", str(port)],
        env={"MCP_TEST_LOG": str(log), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(f"the HTTP MCP server {name} did not come up") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def log_lines(log: Path) -> list[str]:
    """What the test servers recorded."""
    return log.read_text().splitlines() if log.exists() else []


def serve_params(home: Path) -> Any:
    """The SDK client's parameters that start `swarmdeck mcp serve` on this home."""
    import mcp

    return mcp.StdioServerParameters(
        command=sys.executable, args=["-m", "swarmdeck", "mcp", "serve"], env=cli_env(home)
    )


def payload(result: Any) -> Any:
    """A tool result's JSON object (its structured content, which its text repeats)."""
    [block] = result.content
    doc = json.loads(block.text)
    if result.structured_content is not None:
        assert result.structured_content == doc
    return doc
