"""Runtime overhead per turn, against a bare DBOS step measured in the same run.

N sessions x M turns against the fake LLM server at zero latency. Each turn is one LLM call
and one tool call (a no-op `read` tool). The fake server runs in its own process, as a
remote LLM would. The measurements, interleaved in one process, on one fresh store, every
request carrying the same body (system prompt, tool schema, history, stream options):

  http     the floor: the same streamed POST with aiohttp alone, its SSE lines parsed with
           json (no SDK: what any client of the wire format must spend)
  sdk      the SDK's own call path, `client.chat.completions.create(**body)`, no runtime
  adapter  swarmdeck's provider adapter alone (limiter, key read, request, stream parsing)
  dbos     a bare DBOS workflow: per turn, one step making the SDK call, one running the tool
  ours     swarmdeck sessions doing the same turns
  traced   the same sessions with OpenTelemetry on (the SDK, an in-memory exporter)

Tracing and MCP toolsets with nothing configured are hooks at the runtime's seams; their
cost per turn (two no-op span contexts, the MCP toolset's look-up) is timed on its own.

The runtime's overhead per turn is (ours - adapter): what the durable session adds to its
own LLM call. A bare DBOS step costs (dbos - sdk) / 2. The ratio compares the overhead with
what bare DBOS adds for the same two steps. (ours - sdk) is also printed: what a user sees
against calling the SDK by hand, where the adapter's own savings count too.

    python bench/overhead.py [--sessions N] [--turns M] [--store URL] [--repeat K]
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
from typing import Any

from bare_http import http_turn
from dbos import DBOS
from openai import AsyncOpenAI
from quick import parse_with_quick

MODEL = "bench:scripted"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=5)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--store", default=None, help="postgresql://... (default: a fresh SQLite file)")
    p.add_argument("--repeat", type=int, default=9, help="rounds of the measurements")
    return parse_with_quick(p, sessions=2, turns=3, repeat=1)


def script(turns: int) -> dict:
    calls = [{"tool_calls": [{"name": "noop", "arguments": {"n": i}}]} for i in range(turns - 1)]
    return {"scenarios": [{"turns": [*calls, {"text": "done"}]}]}


async def _sdk_turn(client: AsyncOpenAI, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed call through the SDK's create(), read as the SDK documents it."""
    stream = await client.chat.completions.create(**body)
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


def _noop_tool(i: int) -> str:
    return f"ok {i}"


async def _sdk_session(
    client: Any, first_body: dict[str, Any], turns: int, step: Any = None, turn: Any = _sdk_turn
) -> None:
    """One session's turns through the SDK (or `turn`'s client); `step` wraps each call
    (bare DBOS) or not."""
    body = {**first_body, "messages": list(first_body["messages"])}
    messages = body["messages"]
    for i in range(turns):
        if step is None:
            reply = await turn(client, body)
        else:
            reply = await step("llm", turn, client, body)
        messages.append(
            {"role": "assistant", "content": reply["text"] or None, "tool_calls": reply["calls"]}
            if reply["calls"]
            else {"role": "assistant", "content": reply["text"]}
        )
        for call in reply["calls"]:
            out = _noop_tool(i) if step is None else await step("tool", _async_noop, i)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": out})


async def _async_noop(i: int) -> str:
    return _noop_tool(i)


async def _dbos_step(name: str, fn: Any, *args: Any) -> Any:
    return await DBOS.run_step_async({"name": name}, fn, *args)


_clients: dict[str, AsyncOpenAI] = {}


def shared_client(base_url: str) -> AsyncOpenAI:
    """One SDK client per process, as the runtime shares one HTTP client: building a client
    costs about 20 ms (its TLS context), which no side should pay per session."""
    if base_url not in _clients:
        _clients[base_url] = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    return _clients[base_url]


@DBOS.workflow(name="bench.bare")
async def bare_workflow(base_url: str, first_body: dict[str, Any], turns: int) -> int:
    await _sdk_session(shared_client(base_url), first_body, turns, _dbos_step)
    return turns


async def http_only(base_url: str, first_body: dict[str, Any], sessions: int, turns: int) -> float:
    import aiohttp

    async with aiohttp.ClientSession() as session:  # one pool, as the runtime's
        client = (session, f"{base_url}/chat/completions")
        start = time.perf_counter()
        for _ in range(sessions):
            await _sdk_session(client, first_body, turns, turn=http_turn)
        return time.perf_counter() - start


async def sdk_only(base_url: str, first_body: dict[str, Any], sessions: int, turns: int) -> float:
    client = shared_client(base_url)
    start = time.perf_counter()
    for _ in range(sessions):
        await _sdk_session(client, first_body, turns)
    return time.perf_counter() - start


async def adapter_only(
    host: Any, first: list[Any], specs: list[Any], sessions: int, turns: int
) -> float:
    from swarmdeck.models.types import Message

    model = host.services.model(MODEL)
    start = time.perf_counter()
    for _ in range(sessions):
        messages = list(first)
        for i in range(turns):
            completion = await model.complete(messages, specs)
            messages.append(Message("assistant", completion.text, tuple(completion.tool_calls)))
            for call in completion.tool_calls:
                messages.append(Message("tool", _noop_tool(i), tool_call_id=call.id))
    return time.perf_counter() - start


async def bare_dbos(base_url: str, first_body: dict[str, Any], sessions: int, turns: int) -> float:
    start = time.perf_counter()
    for _ in range(sessions):
        handle = await DBOS.start_workflow_async(bare_workflow, base_url, first_body, turns)
        await handle.get_result()
    return time.perf_counter() - start


async def ours(host: Any, workdir: Path, sessions: int, turns: int) -> float:
    from swarmdeck.runtime.host import SessionRequest

    start = time.perf_counter()
    for _ in range(sessions):
        record = host.create_session(
            SessionRequest(
                "bench", MODEL, workdir, tool_names=["noop"], options={"max_turns": turns + 1}
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
    from fake_server import fake_llm_process

    from swarmdeck.config import load_settings
    from swarmdeck.models.registry import ProviderConfig
    from swarmdeck.models.types import Message
    from swarmdeck.runtime.host import Host, default_tools
    from swarmdeck.runtime.prompts import system_prompt
    from swarmdeck.tools.decorator import tool

    @tool(effect="read")
    async def noop(n: int) -> str:
        """Do nothing."""
        return _noop_tool(n)  # async, like the bare DBOS step's tool: no thread hand-off

    workdir = home / "work"
    workdir.mkdir()
    with fake_llm_process(script(args.turns)) as base_url:
        host = Host(load_settings(), [*default_tools(), noop])
        host.services.providers.register(
            ProviderConfig(
                key="bench", kind="openai", base_url=base_url, model="scripted", needs_key=False
            )
        )
        host.launch()
        # The very first request of every measurement, exactly as the runtime builds it.
        first = [Message("system", system_prompt(str(workdir), None)), Message("user", "bench")]
        specs = [noop.spec()]
        first_body = host.services.model(MODEL).request_body(first, specs)
        tracing = in_memory_tracing(host)
        measures = {
            "http": lambda n: http_only(base_url, first_body, n, args.turns),
            "sdk": lambda n: sdk_only(base_url, first_body, n, args.turns),
            "adapter": lambda n: adapter_only(host, first, specs, n, args.turns),
            "dbos": lambda n: bare_dbos(base_url, first_body, n, args.turns),
            "ours": lambda n: ours(host, workdir, n, args.turns),
        }
        if tracing is not None:
            measures["traced"] = lambda n: traced(host, tracing, workdir, n, args.turns)

        async def measure() -> tuple[dict[str, list[float]], float]:
            runs: dict[str, list[float]] = {k: [] for k in measures}
            try:
                for run in measures.values():  # warm up every path once
                    await run(2)
                for _ in range(args.repeat):
                    for name, run in measures.items():
                        runs[name].append(await run(args.sessions))
                return runs, await idle_hooks(host, workdir)
            finally:
                # The HTTP pools belong to this loop: closed on it.
                await host.services.aclose()
                for client in _clients.values():
                    await client.close()

        try:
            runs, hooks = asyncio.run(measure())
        finally:
            host.shutdown()
    report(args, runs, hooks)


def in_memory_tracing(host: Any) -> Any:
    """Tracing through the OpenTelemetry SDK into memory (None without the otel extra)."""
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        return None
    from swarmdeck.integrations.telemetry.tracing import OtelTracing

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return OtelTracing(provider, host.services.redactor.redact)


async def traced(host: Any, tracing: Any, workdir: Path, sessions: int, turns: int) -> float:
    from swarmdeck.integrations.telemetry.tracing import NO_TRACING

    host.services.tracing = tracing
    try:
        return await ours(host, workdir, sessions, turns)
    finally:
        host.services.tracing = NO_TRACING


async def idle_hooks(host: Any, workdir: Path, n: int = 20_000) -> float:
    """Seconds per turn of the seams' hooks with nothing configured: the turn's and the tool
    call's span contexts (no-ops) and the MCP toolset's look-up of the session's servers."""
    from swarmdeck.integrations.telemetry.tracing import NO_TRACING
    from swarmdeck.tools.toolsets import SessionScope

    [toolset] = host.services.toolsets
    scope = SessionScope("bench", "agent", workdir, {}, ())
    start = time.perf_counter()
    for _ in range(n):
        with NO_TRACING.turn(None) as turn:
            turn.completed(None, [])
        with NO_TRACING.tool(None) as tool:
            tool.finished("", False)
        await toolset.tools_for(scope)
    return (time.perf_counter() - start) / n


def paired(runs: dict[str, list[float]], a: str, b: str, turns: int) -> float:
    """Median over rounds of (a - b) per turn, in ms: all of them run back to back in each
    round, so a slow spell of the machine lands on both sides of each difference."""
    return statistics.median(x - y for x, y in zip(runs[a], runs[b], strict=True)) / turns * 1000


def report(args: argparse.Namespace, runs: dict[str, list[float]], hooks: float) -> None:
    turns = args.sessions * args.turns
    med = {k: statistics.median(v) / turns * 1000 for k, v in runs.items()}
    bare = paired(runs, "dbos", "sdk", turns)
    overhead = paired(runs, "ours", "adapter", turns)
    store = "PostgreSQL" if args.store else "SQLite (WAL, synchronous=NORMAL)"
    print(
        f"store: {store}; {args.sessions} sessions x {args.turns} turns; medians of {args.repeat} rounds"
    )
    print(f"  bare HTTP (aiohttp, no SDK): the floor         {med['http']:8.3f} ms/turn")
    print(
        f"  SDK create() alone (fake server, zero latency) {med['sdk']:8.3f} ms/turn"
        f"  ({med['sdk'] / med['http']:.2f}x bare HTTP)"
    )
    print(
        f"  swarmdeck's adapter alone                      {med['adapter']:8.3f} ms/turn"
        f"  ({med['adapter'] / med['sdk']:.2f}x the SDK call, "
        f"{med['adapter'] / med['http']:.2f}x bare HTTP)"
    )
    print(
        f"  bare DBOS, same turns                          {med['dbos']:8.3f} ms/turn"
        f"  (+{bare:.3f} ms: 2 steps)"
    )
    print(
        f"  swarmdeck, same turns                          {med['ours']:8.3f} ms/turn"
        f"  ({paired(runs, 'ours', 'sdk', turns):+.3f} ms against the SDK call)"
    )
    print(f"  bare DBOS step                                 {bare / 2:8.3f} ms")
    print(f"  swarmdeck overhead per durable step            {overhead / 2:8.3f} ms")
    print(
        f"  ratio swarmdeck overhead / bare DBOS           {overhead / bare:8.2f}x   (goal <= 1.5)"
    )
    print(
        f"  swarmdeck overhead per turn                    {overhead:8.3f} ms   (goal <= 2 ms on SQLite)"
    )
    print(
        f"  seams' hooks, nothing configured               {hooks * 1e6:8.2f} us/turn"
        f"  ({hooks * 1000 / overhead:.2%} of the overhead per turn)"
    )
    if "traced" in runs:
        print(
            f"  with tracing on (SDK, in-memory exporter)      "
            f"{paired(runs, 'traced', 'ours', turns):+8.3f} ms/turn"
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
