"""Runtime overhead per turn, against a bare DBOS step measured in the same run.

N sessions x M turns against the fake LLM server at zero latency. Each turn is one LLM step
and one tool step (a no-op `read` tool). Measured in one process, on one fresh store:

  sdk     M bare SDK calls (the same requests, no runtime): the LLM's own cost at zero latency
  dbos    a bare DBOS workflow doing the same work: per turn, one step that makes the SDK
          call and one step that runs the tool body
  ours    swarmdeck sessions doing the same turns

overhead per turn = (ours - sdk) per turn; the bare DBOS cost of a turn = (dbos - sdk) per
turn (two bare steps); ratio = overhead / bare DBOS cost of the same two steps. Also printed
per durable step (ratio is the same).

    python bench/overhead.py [--sessions N] [--turns M] [--store URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from dbos import DBOS
from openai import AsyncOpenAI


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=10)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--store", default=None, help="postgresql://... (default: a fresh SQLite file)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each measurement; medians")
    return p.parse_args()


def script(turns: int) -> dict:
    calls = [{"tool_calls": [{"name": "noop", "arguments": {"n": i}}]} for i in range(turns - 1)]
    return {"scenarios": [{"turns": [*calls, {"text": "done"}]}]}


@DBOS.workflow(name="bench.bare")
async def bare_workflow(base_url: str, turns: int) -> int:
    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    messages: list[dict] = [{"role": "user", "content": "bench"}]
    for i in range(turns):
        reply = await DBOS.run_step_async({"name": "llm"}, _llm, client, messages)
        messages.append(
            {"role": "assistant", "content": reply["text"], "tool_calls": reply["calls"] or None}
        )
        for call in reply["calls"]:
            out = await DBOS.run_step_async({"name": "tool"}, _noop_tool, i)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": out})
    return turns


async def _llm(client: AsyncOpenAI, messages: list[dict]) -> dict:
    # Streamed, with usage, as swarmdeck's adapter asks: the same work on the wire.
    msgs = [{k: v for k, v in m.items() if v is not None} for m in messages]
    stream = await client.chat.completions.create(
        model="bench",
        messages=msgs,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, calls = "", {}
    async for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for c in choice.delta.tool_calls or []:
                call = calls.setdefault(
                    c.index,
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": ""},
                    },
                )
                call["function"]["arguments"] += c.function.arguments or ""
    return {"text": text, "calls": list(calls.values())}


async def _noop_tool(i: int) -> str:
    return f"ok {i}"


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "noop",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    }
]


async def sdk_only(base_url: str, sessions: int, turns: int) -> float:
    client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    start = time.perf_counter()
    for _ in range(sessions):
        messages: list[dict] = [{"role": "user", "content": "bench"}]
        for i in range(turns):
            reply = await _llm(client, messages)
            messages.append(
                {
                    "role": "assistant",
                    "content": reply["text"],
                    "tool_calls": reply["calls"] or None,
                }
            )
            for call in reply["calls"]:
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": await _noop_tool(i)}
                )
    return time.perf_counter() - start


async def bare_dbos(base_url: str, sessions: int, turns: int) -> float:
    start = time.perf_counter()
    for _ in range(sessions):
        handle = await DBOS.start_workflow_async(bare_workflow, base_url, turns)
        await handle.get_result()
    return time.perf_counter() - start


async def ours(host, workdir: Path, sessions: int, turns: int) -> float:
    from swarmdeck.runtime.host import SessionRequest

    start = time.perf_counter()
    for _ in range(sessions):
        record = host.create_session(
            SessionRequest(
                "bench",
                "bench:scripted",
                workdir,
                tool_names=["noop"],
                options={"max_turns": turns + 1},
            )
        )
        await host.start(record.id)
        outcome = await host.wait(record.id)
        assert outcome["status"] == "completed", outcome
    return time.perf_counter() - start


def main() -> None:
    args = parse_args()
    home = Path(tempfile.mkdtemp(prefix="sd-bench-"))
    os.environ["SWARMDECK_HOME"] = str(home)
    if args.store:
        os.environ["SWARMDECK_STORE"] = args.store
    from swarmdeck.config import load_settings
    from swarmdeck.models.registry import ProviderConfig
    from swarmdeck.runtime.host import Host, default_tools
    from swarmdeck.testing.fake_llm import FakeLLM
    from swarmdeck.tools.decorator import tool

    @tool(effect="read")
    def noop(n: int) -> str:
        """Do nothing."""
        return f"ok {n}"

    workdir = home / "work"
    workdir.mkdir()
    with FakeLLM(script(args.turns)) as fake:
        host = Host(load_settings(), [*default_tools(), noop])
        host.services.providers.register(
            ProviderConfig(
                key="bench",
                kind="openai",
                base_url=fake.openai_base_url,
                model="scripted",
                needs_key=False,
            )
        )
        host.launch()

        async def measure() -> dict[str, list[float]]:
            runs: dict[str, list[float]] = {"sdk": [], "dbos": [], "ours": []}
            await ours(host, workdir, 2, args.turns)  # warm up every path once
            await bare_dbos(fake.openai_base_url, 2, args.turns)
            for _ in range(args.repeat):
                runs["sdk"].append(await sdk_only(fake.openai_base_url, args.sessions, args.turns))
                runs["dbos"].append(
                    await bare_dbos(fake.openai_base_url, args.sessions, args.turns)
                )
                runs["ours"].append(await ours(host, workdir, args.sessions, args.turns))
            return runs

        try:
            runs = asyncio.run(measure())
        finally:
            host.shutdown()
    turns = args.sessions * args.turns
    med = {k: statistics.median(v) / turns * 1000 for k, v in runs.items()}
    bare = med["dbos"] - med["sdk"]
    overhead = med["ours"] - med["sdk"]
    store = "PostgreSQL" if args.store else "SQLite (WAL, synchronous=NORMAL)"
    print(
        f"store: {store}; {args.sessions} sessions x {args.turns} turns; medians of {args.repeat} runs"
    )
    print(f"  SDK call alone (fake server, zero latency) {med['sdk']:8.3f} ms/turn")
    print(
        f"  bare DBOS, same turns                      {med['dbos']:8.3f} ms/turn  (+{bare:.3f} ms: 2 steps)"
    )
    print(
        f"  swarmdeck, same turns                      {med['ours']:8.3f} ms/turn  (+{overhead:.3f} ms)"
    )
    print(f"  bare DBOS step                             {bare / 2:8.3f} ms")
    print(f"  swarmdeck overhead per durable step        {overhead / 2:8.3f} ms")
    print(f"  ratio swarmdeck / bare DBOS                {overhead / bare:8.2f}x   (goal <= 1.5)")
    print(
        f"  swarmdeck overhead per turn                {overhead:8.3f} ms   (goal <= 2 ms on SQLite)"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
