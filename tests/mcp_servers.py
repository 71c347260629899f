"""A real MCP server written with the SDK's MCPServer (FastMCP in mcp 1.x), for the tests:
`python -m tests.mcp_servers NAME [--http PORT] [--hang]`, on stdio unless --http.

With $MCP_TEST_PIDS set to a folder, the server writes PID there as `NAME.PID`, holding
its working directory (a test checks that no server outlives its session, and where it ran).

Tools: echo, add, record (appends a line to $MCP_TEST_LOG, so a test counts runs), slow
(records, then sleeps: a process is killed in the middle of it), crash (the server exits
in the middle of the call), env (a variable of the server's environment).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _record(server: str, what: str) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{server}:{what}\n")


def _write_pid(server: str) -> None:
    folder = os.environ.get("MCP_TEST_PIDS")
    if folder:
        with open(os.path.join(folder, f"{server}.{os.getpid()}"), "w", encoding="utf-8") as f:
            f.write(os.getcwd())


def build(name: str):
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(name, log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text as it was given."""
        return f"{name} says {text}"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def record(text: str) -> str:
        """Record a line in the test's log (a side effect)."""
        _record(name, text)
        return f"recorded {text}"

    @server.tool()
    async def slow(text: str, seconds: float) -> str:
        """Record a line, then take `seconds` to answer."""
        import anyio

        _record(name, text)
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def crash(text: str) -> str:
        """Die in the middle of the call."""
        _record(name, f"crash {text}")
        os._exit(3)

    @server.tool()
    def read(path: str) -> str:
        """A file's text, or why it cannot be read (a server the model points anywhere)."""
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except OSError as exc:
            return f"cannot read {path}: {exc.strerror}"

    @server.tool()
    def env(variable: str) -> str:
        """The value of one of the server's environment variables ('' when unset)."""
        return os.environ.get(variable, "")

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("name")
    parser.add_argument("--http", type=int, default=0)
    parser.add_argument("--hang", action="store_true", help="never answer: a hung start-up")
    args = parser.parse_args()
    _write_pid(args.name)
    _record(args.name, "started")
    if args.hang:
        time.sleep(3600)
        return
    server = build(args.name)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run()
    sys.exit(0)


if __name__ == "__main__":
    main()
