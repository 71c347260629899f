"""Tools on demand: what the runtime itself adds to every turn, loaded lazily against eagerly.

Two sessions, each run twice in the same run, once with `tool_loading: lazy` (the core
tools' schemas, an index line for the rest) and once `eager` (every schema every turn):

- the demo: `swarmdeck demo`'s session (scripted model, sub-agents, a report, NOTES.md),
  measured as its inspector shows it: the runtime's tokens (system prompt and tool
  schemas) of its last turn; it must complete either way;
- a code-mode session with 7 real MCP servers of 15 tools each (bench/mcp_wide_server.py,
  started over stdio by the session), on the fake LLM server: the same figure for its turn;
  on an openai provider (swarmdeck's index and load_tools), and lazily once more on an
  anthropic one and on an openai-responses one, where the vendor's tool search finds the
  deferred tools (`search`; OpenAI's shows the model their names and descriptions).

Each configuration runs in a process of its own with its own home.

    python bench/tools.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quick import parse_with_quick

SERVERS = 7
# The MCP session on an anthropic provider: the vendor's tool search finds its tools.
SEARCH = "mcp-search"
# The same on OpenAI's Responses API, with its hosted tool search.
RESPONSES = "mcp-responses"
KINDS = {"mcp": "openai", SEARCH: "anthropic", RESPONSES: "openai-responses"}
DEMO_GOAL, MCP_GOAL = 800, 1200
BENCH = Path(__file__).resolve().parent


def runtime_of(host: Any, session_id: str) -> dict[str, int]:
    """The runtime's tokens of the session's first and last turn, as the inspector counts
    them (system prompt + tool schemas), and how many turns it took."""
    turns = [
        e.payload["context"]["runtime"]
        for e in host.catalog.events(session_id, kinds=["assistant"])
        if e.payload.get("context")
    ]
    own = [r["system"] + r["tools"] for r in turns]
    return {"first": own[0], "last": own[-1], "turns": len(own)}


async def _run(host: Any, session_id: str) -> None:
    from swarmdeck.cli.following import run_and_follow

    try:
        await run_and_follow(host, session_id, quiet=True)
    finally:
        await host.aclose()


def one_demo(loading: str) -> dict[str, Any]:
    """The demo session, with tools loaded `loading`."""
    from swarmdeck.cli.demo import DEMO_MODEL, DEMO_TASK, make_demo_project
    from swarmdeck.runtime.host import Host, SessionRequest

    host = Host()
    request = SessionRequest(
        DEMO_TASK, DEMO_MODEL, make_demo_project(), options={"tool_loading": loading}
    )
    record = host.create_session(request)
    asyncio.run(_run(host, record.id))
    status = host.catalog.get_session(record.id).status
    return {"status": status, **runtime_of(host, record.id)}


def one_mcp(loading: str, servers: int, kind: str = "openai") -> dict[str, Any]:
    """A code-mode session with `servers` MCP servers of 15 tools, one turn, on a provider
    of this kind (anthropic: tools deferred to its tool search)."""
    import yaml

    from swarmdeck.runtime.host import Host, SessionRequest
    from swarmdeck.testing.fake_llm import FakeLLM
    from swarmdeck.testing.script import Reply

    home = Path(os.environ["SWARMDECK_HOME"])
    workdir = home.parent / "project"
    workdir.mkdir()
    entries = {
        f"tracker{i}": {
            "command": sys.executable,
            "args": [str(BENCH / "mcp_wide_server.py"), f"tracker{i}"],
            "default": True,
            "effect": "read",
        }
        for i in range(servers)
    }
    (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": entries}))
    with FakeLLM(lambda _req: Reply(text="Nothing to change.")) as fake:
        (home / "providers").mkdir(parents=True, exist_ok=True)
        url = fake.anthropic_base_url if kind == "anthropic" else fake.openai_base_url
        # The plain edit tools on both: the figures then differ by the loading alone.
        provider = {"key": "fake", "kind": kind, "base_url": url, "model": "scripted",
                    "display_name": "fake", "needs_key": False,
                    "edit_tools": "plain"}  # fmt: skip
        (home / "providers" / "fake.yaml").write_text(yaml.safe_dump(provider))
        host = Host()
        request = SessionRequest(
            "Say whether anything needs changing.", "fake:scripted", workdir, mode="code",
            options={"tool_loading": loading},
        )  # fmt: skip
        record = host.create_session(request)
        asyncio.run(_run(host, record.id))
        tools = fake.requests[0].body.get("tools") or [] if fake.requests else []
        offered = sum(1 for t in tools if not t.get("defer_loading"))
    status = host.catalog.get_session(record.id).status
    return {"status": status, "schemas_sent": offered, **runtime_of(host, record.id)}


def measure(what: str, loading: str, servers: int) -> dict[str, Any]:
    """Run one configuration in a process of its own, with a home of its own."""
    with tempfile.TemporaryDirectory(prefix="sd-bench-tools-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMDECK_")}
        env["SWARMDECK_HOME"] = str(Path(tmp) / "home")
        args = [sys.executable, __file__, "--one", what, loading, str(servers)]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{what} ({loading}) failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--servers", type=int, default=SERVERS, help="MCP servers (15 tools each)")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parse_with_quick(parser, servers=2)
    if args.one:
        what, loading, servers = args.one
        found = one_demo(loading) if what == "demo" else one_mcp(loading, int(servers), KINDS[what])
        print(json.dumps(found))
        return
    rows = {
        (what, loading): measure(what, loading, args.servers)
        for what in ("demo", "mcp")
        for loading in ("eager", "lazy")
    }
    rows[SEARCH, "lazy"] = measure(SEARCH, "lazy", args.servers)
    rows[RESPONSES, "lazy"] = measure(RESPONSES, "lazy", args.servers)
    label = {
        "demo": "demo session",
        "mcp": f"{args.servers} MCP servers x 15 tools",
        SEARCH: f"{args.servers} MCP servers, tool search",
        RESPONSES: f"{args.servers} MCP, Responses search",
    }
    print(f"{'session':<28} {'loading':<7} {'status':<10} {'first':>6} {'last':>6} {'turns':>5}")
    for (what, loading), r in rows.items():
        print(
            f"{label[what]:<28} {'search' if what in (SEARCH, RESPONSES) else loading:<7} "
            f"{r['status']:<10} {r['first']:>6} "
            f"{r['last']:>6} {r['turns']:>5}"
        )
    demo, mcp, eager = rows["demo", "lazy"], rows["mcp", "lazy"], rows["mcp", "eager"]
    vendor = rows[SEARCH, "lazy"]
    print(
        f"demo: {rows['demo', 'eager']['last'] / demo['last']:.1f}x fewer runtime tokens "
        f"(goal: <= {DEMO_GOAL}); MCP: {eager['last'] / mcp['last']:.1f}x fewer "
        f"(goal: <= {MCP_GOAL}); the same task success: "
        f"{all(r['status'] == 'completed' for r in rows.values())}"
    )
    print(
        f"with Anthropic's tool search: {args.servers} MCP servers {vendor['last']} "
        f"(load_tools {mcp['last']}, eager {eager['last']})"
    )
    print(
        f"with the Responses API's tool search: {args.servers} MCP servers "
        f"{rows[RESPONSES, 'lazy']['last']} (load_tools {mcp['last']}, eager {eager['last']})"
    )
    print(
        f"runtime tokens per turn: demo {demo['last']}, {args.servers} MCP servers "
        f"{mcp['last']} (eager {eager['last']})"
    )


if __name__ == "__main__":
    main()
