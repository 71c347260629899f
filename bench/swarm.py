"""A four-member swarm against a fake LLM that answers each request after 500 ms.

The coordinator plans (one reply), four members each take three turns in parallel (a
directory listing, a file read, the result), then the coordinator merges (one reply): the
critical path is five model replies, 2.5 s. The goal is a swarm that finishes within 1.15x
its critical path. Measured in the same run, doing the same model calls (the same SDK, the
same server):

- bare: plain asyncio and the openai SDK, no journal, no sessions (what the work costs);
- poll: the same, but completion detected by polling a mailbox every 5 s, as llmcode's
  coordinator does (its POLL_INTERVAL), which cannot finish before its first poll.

Printed: wall times (median of --runs, after a warm-up swarm), ratios, the runtime's own
share (wall time minus the critical path), and the cold `swarmdeck swarm` command. Then
what the family's shared prompt prefix does (bench/prefix_share.py): the cached share of
all input and how many members' first requests the shared prefix served, against each
session building its own prompt, in the same run.

    python bench/swarm.py [--runs 3] [--latency 0.5] [--store postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quick import parse_with_quick

MEMBERS = 4
MEMBER_TURNS = 3
LLMCODE_POLL_S = 5.0
GOAL = 1.15
FACT = {"facts": [{"fact": "main returns 42", "file_line": "app.py:2"}], "truncated": False}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--latency", type=float, default=0.5, help="seconds per model reply")
    p.add_argument("--store", default=None, help="postgresql://... (default: a fresh SQLite file)")
    return parse_with_quick(p, runs=1, latency=0.05)


def script(latency: float) -> dict:
    """The fake model: the coordinator plans then merges; each member lists, reads, submits."""
    plan = {
        "members": [
            {"role": f"m{i}", "task": f"MEMBER-{i}: what does app.py return?", "mode": "explore"}
            for i in range(MEMBERS)
        ]
    }
    member_turns = [
        {"tool_calls": [{"name": "list_dir", "arguments": {}}], "delay": latency},
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}], "delay": latency},
        {
            "tool_calls": [{"name": "submit_result", "arguments": {"result": FACT}}],
            "delay": latency,
        },
    ]
    return {
        "scenarios": [
            {"match": "MEMBER-", "turns": member_turns},
            {
                "match": "SWARM BENCH",
                "turns": [
                    {"tool_calls": [{"name": "submit_plan", "arguments": plan}], "delay": latency},
                    {"text": "app.py returns 42 (four members agree).", "delay": latency},
                ],
            },
        ]
    }


async def bare_swarm(base_url: str, poll_s: float | None = None) -> float:
    """The same model calls without a runtime; with `poll_s`, the coordinator learns of the
    members' completion only at its polls, as llmcode's does."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=60)

    async def ask(task: str, turns: int) -> None:
        messages: list[dict] = [{"role": "user", "content": task}]
        for turn in range(turns):
            reply = await client.chat.completions.create(model="bench", messages=messages)
            calls = reply.choices[0].message.tool_calls or []
            messages.append(reply.choices[0].message.model_dump(exclude_none=True))
            messages += [
                {"role": "tool", "tool_call_id": c.id, "content": f"result {turn}"} for c in calls
            ]

    started = time.perf_counter()
    await ask("SWARM BENCH", 1)
    done: set[int] = set()

    async def member(i: int) -> None:
        await ask(f"MEMBER-{i}: what does app.py return?", MEMBER_TURNS)
        done.add(i)

    tasks = [asyncio.ensure_future(member(i)) for i in range(MEMBERS)]
    if poll_s is None:
        await asyncio.gather(*tasks)
    else:
        while len(done) < MEMBERS:
            await asyncio.sleep(poll_s)
    messages = [
        {"role": "user", "content": "SWARM BENCH"},
        {"role": "assistant", "content": "planned"},
        {"role": "user", "content": "merge"},
    ]
    await client.chat.completions.create(model="bench", messages=messages)
    wall = time.perf_counter() - started
    await client.close()
    return wall


async def our_swarm(swarm: object, workdir: Path) -> tuple[float, dict]:
    started = time.perf_counter()
    doc = await swarm.coordinate("SWARM BENCH", workdir=workdir, model="bench")  # type: ignore[attr-defined]
    wall = time.perf_counter() - started
    assert doc["verdict"] == "completed", doc
    assert [m["result"]["facts"] for m in doc["members"]] == [FACT["facts"]] * MEMBERS
    return wall, doc


def cold_cli(home: Path, workdir: Path) -> tuple[float, float]:
    """`swarmdeck swarm` from process start to exit (imports, engine start, shutdown), and
    the swarm's own duration inside it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMDECK_")}
    env["SWARMDECK_HOME"] = str(home)
    if os.environ.get("SWARMDECK_STORE"):
        env["SWARMDECK_STORE"] = os.environ["SWARMDECK_STORE"]
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "swarmdeck",
            "swarm",
            "SWARM BENCH",
            "-C",
            str(workdir),
            "-m",
            "bench",
            "--json",
            "-q",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    wall = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "completed"
    return wall, doc["duration_s"]


def main() -> None:
    args = parse_args()
    home = Path(tempfile.mkdtemp(prefix="sd-swarm-"))
    os.environ["SWARMDECK_HOME"] = str(home)
    if args.store:
        os.environ["SWARMDECK_STORE"] = args.store
    sys.path.insert(0, str(Path(__file__).parent))
    from fake_server import fake_llm_process, write_bench_provider

    from swarmdeck import Swarm

    workdir = home / "work"
    workdir.mkdir()
    (workdir / "app.py").write_text("def main():\n    return 42\n")
    critical = (2 + MEMBER_TURNS) * args.latency
    with fake_llm_process(script(args.latency)) as base_url:
        write_bench_provider(home, base_url, concurrency=16)
        swarm = Swarm()

        async def measure() -> tuple[list[float], list[float], float, dict]:
            # aclose() on the loop the model pools were opened on: close() after
            # asyncio.run() left them to be reported unclosed.
            async with swarm:
                await our_swarm(swarm, workdir)  # warm-up: SDK imports, first connections
                ours, bare = [], []
                doc: dict = {}
                for _ in range(args.runs):
                    wall, doc = await our_swarm(swarm, workdir)
                    ours.append(wall)
                    bare.append(await bare_swarm(base_url))
                poll = await bare_swarm(base_url, LLMCODE_POLL_S)
                return ours, bare, poll, doc

        ours, bare, poll, doc = asyncio.run(measure())
        cli, cli_swarm = cold_cli(home, workdir)
    wall, bare_wall = statistics.median(ours), statistics.median(bare)
    store = "PostgreSQL" if args.store else "SQLite (WAL, synchronous=NORMAL)"
    print(f"store: {store}; {MEMBERS} members x {MEMBER_TURNS} turns, {args.latency:g} s a reply")
    print(f"  critical path (5 model replies)                {critical:6.2f} s")
    print(
        f"  bare asyncio + SDK, no runtime (same calls)    {bare_wall:6.2f} s   {bare_wall / critical:.2f}x"
    )
    print(
        f"  llmcode's design (mailbox polled every 5 s)    {poll:6.2f} s   {poll / critical:.2f}x"
    )
    print(
        f"  swarmdeck swarm, median of {args.runs}                 {wall:6.2f} s   "
        f"(runs: {', '.join(f'{w:.2f}' for w in ours)})"
    )
    print(
        f"  runtime's own share (wall - critical path)     {wall - critical:6.2f} s   "
        f"({(wall - critical) * 1000 / (2 + MEMBERS * MEMBER_TURNS):.0f} ms per model turn)"
    )
    print(f"  swarmdeck / bare                               {wall / bare_wall:6.2f}x")
    print(f"  swarmdeck / llmcode's design                   {wall / poll:6.2f}x")
    print(
        f"  cold `swarmdeck swarm` (process start to exit) {cli:6.2f} s   "
        f"(the swarm inside it: {cli_swarm:.2f} s, its first model call included)"
    )
    print(f"  tokens {doc['tokens']['input'] + doc['tokens']['output']}, goal <= {GOAL:.2f}x")
    print(f"swarm / critical path: {wall / critical:.2f}")
    from prefix_share import report

    # One cached prefix for a family: 4 members, and a fan-out to 20 sub-agents (2 quick).
    print("\none cached prefix (tools.shared_prefix on and off, in the same run):")
    report(2 if args.runs == 1 and args.latency < 0.1 else 20)


if __name__ == "__main__":
    main()
