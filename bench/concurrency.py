"""1,000 concurrent sessions, each `wait(1)` then one more turn, on one machine.

Each session's model asks for wait(1) in its first turn, sleeps durably for one second, and
answers in its second turn: two LLM calls against the fake server (zero latency, in its own
process, as a remote LLM would be). The ideal wall time is the 1 s wait. The same run
measures two bare-DBOS peers: 1,000 x (sleep 1 s + one step), the figure in DBOS-NOTES.md,
and 1,000 x (one step calling the LLM, sleep 1 s, one step calling the LLM) -- the same
work as ours without the runtime. Printed: wall times, ratios, throughput, peak memory.

    python bench/concurrency.py [--sessions 1000] [--store postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import time
from pathlib import Path

from dbos import DBOS


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--wait", type=float, default=1.0)
    p.add_argument("--store", default=None, help="postgresql://... (default: a fresh SQLite file)")
    return p.parse_args()


@DBOS.workflow(name="bench.sleep_then_step")
async def bare_session(seconds: float) -> None:
    await DBOS.sleep_async(seconds)
    await DBOS.run_step_async({"name": "step"}, _noop)


@DBOS.workflow(name="bench.llm_sleep_llm")
async def bare_same_work(base_url: str, seconds: float) -> None:
    await DBOS.run_step_async({"name": "llm"}, _llm, base_url, 0)
    await DBOS.sleep_async(seconds)
    await DBOS.run_step_async({"name": "llm"}, _llm, base_url, 1)


_CLIENTS: dict[str, object] = {}


async def _llm(base_url: str, turn: int) -> str:
    from openai import AsyncOpenAI

    client = _CLIENTS.setdefault(
        base_url, AsyncOpenAI(base_url=base_url, api_key="b", max_retries=0, timeout=120)
    )
    messages: list[dict] = [{"role": "user", "content": "bench"}]
    if turn:
        call = {
            "id": "call_0_0",
            "type": "function",
            "function": {"name": "wait", "arguments": "{}"},
        }
        messages += [
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0_0", "content": "waited"},
        ]
    stream = await client.chat.completions.create(
        model="bench", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    async for _ in stream:
        pass
    return "ok"


async def _noop() -> None:
    return None


def peak_rss_mib() -> float:
    """Peak resident memory of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    args = parse_args()
    home = Path(tempfile.mkdtemp(prefix="sd-conc-"))
    os.environ["SWARMDECK_HOME"] = str(home)
    if args.store:
        os.environ["SWARMDECK_STORE"] = args.store
    from fake_server import fake_llm_process

    from swarmdeck.config import load_settings
    from swarmdeck.models.registry import ProviderConfig
    from swarmdeck.runtime.host import Host, SessionRequest

    script = {
        "scenarios": [
            {
                "turns": [
                    {"tool_calls": [{"name": "wait", "arguments": {"seconds": args.wait}}]},
                    {"text": "done"},
                ]
            }
        ]
    }
    workdir = home / "work"
    workdir.mkdir()
    with fake_llm_process(script) as base_url:
        host = Host(load_settings())
        host.services.providers.register(
            ProviderConfig(
                key="bench",
                kind="openai",
                base_url=base_url,
                model="scripted",
                needs_key=False,
                concurrency=256,
            )
        )
        host.launch()

        async def run_ours() -> tuple[float, float]:
            t0 = time.perf_counter()
            ids = []
            for _ in range(args.sessions):
                record = host.create_session(
                    SessionRequest("bench", "bench:scripted", workdir, tool_names=["wait"])
                )
                ids.append(record.id)
            created = time.perf_counter() - t0
            t1 = time.perf_counter()
            await asyncio.gather(*(host.start(i) for i in ids))
            outcomes = await asyncio.gather(*(host.wait(i) for i in ids))
            wall = time.perf_counter() - t1
            bad = [o for o in outcomes if o.get("status") != "completed"]
            assert not bad, bad[:3]
            return created, wall

        async def run_bare(workflow, *wf_args) -> float:
            t0 = time.perf_counter()
            handles = await asyncio.gather(
                *(DBOS.start_workflow_async(workflow, *wf_args) for _ in range(args.sessions))
            )
            await asyncio.gather(*(h.get_result() for h in handles))
            return time.perf_counter() - t0

        async def all_three() -> tuple[float, float, float, float]:
            bare = await run_bare(bare_session, args.wait)
            same = await run_bare(bare_same_work, base_url, args.wait)
            created, wall = await run_ours()
            return bare, same, created, wall

        try:
            bare, same, created, wall = asyncio.run(all_three())
        finally:
            host.shutdown()
    store = "PostgreSQL" if args.store else "SQLite (WAL, synchronous=NORMAL)"
    n = args.sessions
    print(f"store: {store}; {n} concurrent sessions, each wait({args.wait:g}) then one turn")
    print(f"  bare DBOS, {n} x (sleep + one step)              {bare:7.2f} s")
    print(f"  bare DBOS, {n} x (LLM step, sleep, LLM step)     {same:7.2f} s   (the same work)")
    print(
        f"  swarmdeck, {n} sessions (from start)             {wall:7.2f} s   ideal {args.wait:.2f} s -> {wall / args.wait:.2f}x ideal"
    )
    print(f"  swarmdeck / bare DBOS doing the same work        {wall / same:7.2f}x")
    print(f"  creating the {n} sessions (catalog rows)        {created:7.2f} s")
    print(f"  throughput                                 {n / wall:7.0f} sessions/s")
    print(f"  peak memory (RSS)                          {peak_rss_mib():7.0f} MiB   (goal < 1024)")


if __name__ == "__main__":
    main()
