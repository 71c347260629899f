"""Many waiting sessions in one worker process, and many turns in flight (issue 35).

N sessions wait at once: half on `wait` timers due across a window, half idle on their
inbox. Measured: the process's RSS per waiting session and in all, how late the timers
fire (p95), and, while they wait, how long a message sent at --rate per second takes to
become the model's stored answer (p95; an upper bound of message -> request, the fake model
answering at once). Then --active one-turn sessions whose model takes 500 ms each run at
once in this process: the turns in flight, and the event loop's lag (p99) meanwhile.

`--lead S` puts every timer S seconds later, past the start of the last session: the
lateness then measures waiting sessions only, not a start-up that outlasts the window.

Then bare DBOS does the same waiting work (bench/scale_bare.py: DBOS and aiohttp alone, in as
many processes, on a store of its own) and the figures are printed against its, in the same
run (`--no-bare` skips it).

With `--processes N` the waiting sessions are handed to N `swarmdeck worker` processes on
the store (as `swarmdeck run --fleet` hands them over), messages reach them through the
store alone, and the memory is the workers' RSS summed.

    python bench/scale.py [--sessions 10000] [--window 60] [--lead 0] [--rate 50]
                          [--store URL] [--processes 2] [--no-bare]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proc_stats import cpu_s, rss_mib
from quick import parse_with_quick

sys.path.insert(0, str(Path(__file__).parent))

TIMER_BUCKETS = 20
TURN_LATENCY_S = 0.5
LAG_TICK_S = 0.01
GOAL_RSS_MIB_10K = 2048
GOAL_TIMER_P95_S = 1.0
GOAL_MESSAGE_P95_MS = 500
GOAL_IN_FLIGHT = 50
GOAL_LAG_P99_MS = 50


@dataclass
class Runners:
    """Where the waiting sessions run: this process's host, or `swarmdeck worker`s."""

    host: Any
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def rss(self) -> float:
        """The resident memory of the processes that run the sessions (MiB)."""
        if not self.workers:
            return rss_mib()
        return sum(rss_mib(w.pid) for w in self.workers)

    def cpu_s(self) -> float:
        """CPU seconds the processes that run the sessions have used (this process's when
        they run here, then including the bench's own sending)."""
        if not self.workers:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            return usage.ru_utime + usage.ru_stime
        return sum(cpu_s(w.pid) for w in self.workers)

    async def start(self, requests: list[Any]) -> list[str]:
        """Create and start the sessions; on workers, hand them over in batches."""
        if not self.workers:
            ids = [self.host.create_session(r).id for r in requests]
            for sid in ids:
                await self.host.start(sid)
            return ids
        ids = []
        for at in range(0, len(requests), 500):
            batch = requests[at : at + 500]
            made = await asyncio.to_thread(self.host.create_sessions, batch, fleet=True)
            ids += [r.id for r in made]
        return ids

    async def send(self, sid: str) -> None:
        """A person's message; in this process the sender rings, a worker sees it stored."""
        await asyncio.to_thread(self.host.send, sid, "hello")
        if not self.workers:
            await self.host.ring(sid)


def p(values: list[float], q: float) -> float:
    """The q-quantile of values (0 when there are none)."""
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def script(window: float, lead: float) -> dict:
    """Timer sessions (one bucket each), inbox sessions, active ones."""
    timers = [
        {
            "match": f"timer-{k:02d} ",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "wait", "arguments": {"seconds": delay(k, window, lead)}}
                    ]
                },
                {"text": "woke"},
            ],
        }
        for k in range(TIMER_BUCKETS)
    ]
    inbox = {"match": "inbox ", "turns": [{"text": "ready"}, {"text": "answered"}]}
    active = {"match": "active ", "turns": [{"text": "busy", "delay": TURN_LATENCY_S}]}
    return {"scenarios": [*timers, inbox, active]}


def delay(bucket: int, window: float, lead: float) -> float:
    """When a bucket's timers are due: `lead` seconds on, then spread across the window."""
    return round(lead + window * (bucket + 1) / TIMER_BUCKETS, 3)


class LagMeter:
    """The event loop's lag: how late a 10 ms sleep wakes."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            await asyncio.sleep(LAG_TICK_S)
            self.lags.append(time.perf_counter() - t0 - LAG_TICK_S)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()


async def until(predicate, timeout: float, what: str, every: float = 0.2) -> None:  # type: ignore[no-untyped-def]
    """Poll a predicate (off the loop) until it holds."""
    end = time.monotonic() + timeout
    while not await asyncio.to_thread(predicate):
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(every)


def ended(counts: dict[str, int]) -> int:
    """How many sessions of these counts ended."""
    from swarmdeck.catalog.records import TERMINAL_STATUSES

    return sum(n for status, n in counts.items() if status in TERMINAL_STATUSES)


def status_counts(catalog: Any) -> dict[str, int]:
    """Sessions per status, in one grouped count: the bench polls it beside the workers it
    measures, on the same cores (a read of every session's row a poll took most of a core
    at 10,000 sessions)."""
    import sqlalchemy as sa

    from swarmdeck.catalog import schema

    status = schema.sessions.c.status
    with catalog.engine.connect() as conn:
        rows = conn.execute(sa.select(status, sa.func.count()).group_by(status)).all()
    return {row[0]: row[1] for row in rows}


async def waiting_phase(runners: Runners, args, workdir: Path) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Start the waiting sessions, measure memory, messages and timers."""
    from swarmdeck.runtime.host import SessionRequest

    catalog = runners.host.catalog
    half = args.sessions // 2
    before = runners.rss()
    timer_requests = [
        SessionRequest(
            f"timer-{i % TIMER_BUCKETS:02d} ", "bench:scripted", workdir, tool_names=["wait"]
        )
        for i in range(half)
    ]
    inbox_requests = [
        SessionRequest(
            "inbox ", "bench:scripted", workdir, tool_names=[], options={"one_shot": False}
        )
        for _ in range(args.sessions - half)
    ]
    started = time.time()
    timers = await runners.start(timer_requests)
    inboxes = await runners.start(inbox_requests)

    def all_waiting() -> bool:
        counts = status_counts(catalog)
        return sum(counts.get(s, 0) for s in ("waiting", "idle", "completed")) >= args.sessions

    await until(all_waiting, args.lead + args.window + 600, "every session to wait", every=1.0)
    waiting_rss = runners.rss()
    print(f"  {args.sessions} sessions started and waiting in {time.time() - started:.1f} s")
    latencies = []
    cpu_before, first = runners.cpu_s(), time.monotonic()
    for n, sid in enumerate(inboxes):
        sent = time.time()
        await runners.send(sid)
        latencies.append((sid, sent))
        # On a schedule: a slow send does not lower the rate.
        await asyncio.sleep(max(0.0, first + (n + 1) / args.rate - time.monotonic()))

    pending = [s for s, _ in latencies]

    def answered() -> bool:
        # Oldest first, and only those not yet seen answered: one read a poll, mostly.
        while pending and len(catalog.events(pending[0], kinds=["assistant"])) >= 2:
            pending.pop(0)
        return not pending

    await until(answered, 600, "every message's answer")
    cpu_per_message = (runners.cpu_s() - cpu_before) / max(1, len(latencies))
    message_ms = [
        (catalog.events(s, kinds=["assistant"])[1].ts - sent) * 1000 for s, sent in latencies
    ]
    # The inbox sessions rest (idle) once answered: the ended ones are the timers.
    await until(
        lambda: ended(status_counts(catalog)) >= len(timers),
        args.lead + args.window + 600,
        "every timer",
        every=1.0,
    )
    late = []
    for sid in timers:
        asked = catalog.events(sid, kinds=["assistant"])[0]
        seconds = float(json.loads(asked.payload["tool_calls"][0]["arguments"])["seconds"])
        woke = catalog.events(sid, kinds=["tool_result"])[0].ts
        late.append(max(0.0, woke - asked.ts - seconds))
    return figures(
        {
            "rss": waiting_rss,
            "per_session_kib": (waiting_rss - before) * 1024 / args.sessions,
            "late": late,
            "message_ms": message_ms,
            "message_cpu_ms": cpu_per_message * 1000,
        }
    )


def figures(measured: dict[str, Any]) -> dict[str, float]:
    """The waiting phase's figures from what it measured: RSS, lateness and latency p95."""
    return {
        "rss": measured["rss"],
        "per_session_kib": measured["per_session_kib"],
        "timer_p95": p(measured["late"], 0.95),
        "message_p95": p(measured["message_ms"], 0.95),
        "message_cpu_ms": measured["message_cpu_ms"],
    }


async def active_phase(host, args, workdir: Path) -> tuple[float, int, float]:  # type: ignore[no-untyped-def]
    """--active one-turn sessions at once: (mean turns in flight over the run, the peak,
    loop lag p99 ms)."""
    from swarmdeck.models.factory import preload_adapters
    from swarmdeck.runtime.host import SessionRequest

    request = SessionRequest("active ", "bench:scripted", workdir, tool_names=[])
    # As a worker does as it starts (cli/worker.py's warm-up): the SDK's one-time import
    # (~0.6 s, on the first turn's loop otherwise) is not what a worker's turns cost; nor
    # is the first turn's HTTP client (its TLS context, ~0.1 s): one session runs first.
    config, _model = host.services.provider_for("bench:scripted")
    await asyncio.to_thread(preload_adapters, [config])
    first = host.create_session(request).id
    await host.start(first)
    await host.wait(first)
    ids = [host.create_session(request).id for _ in range(args.active)]
    meter = LagMeter()
    meter.start()
    t0 = time.perf_counter()
    await asyncio.gather(*(host.start(i) for i in ids))
    await asyncio.gather(*(host.wait(i) for i in ids))
    wall = time.perf_counter() - t0
    meter.stop()
    ends = [e.ts for i in ids for e in host.catalog.events(i, kinds=["assistant"])]
    average = args.active * TURN_LATENCY_S / wall
    return average, peak_in_flight(ends), p(meter.lags, 0.99) * 1000


def peak_in_flight(ends: list[float]) -> int:
    """The most turns whose model calls overlapped: each answer stored at `end` was asked
    for at least TURN_LATENCY_S before (the fake model's latency), so [end - latency, end]
    lies within its call; the most such windows over one instant is a lower bound."""
    edges = sorted([(t - TURN_LATENCY_S, 1) for t in ends] + [(t, -1) for t in ends])
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--window", type=float, default=60.0, help="timers due over (s)")
    parser.add_argument(
        "--lead", type=float, default=0.0, help="timers due this long before the window (s)"
    )
    parser.add_argument("--rate", type=float, default=50.0, help="messages per second")
    parser.add_argument("--active", type=int, default=60, help="one-turn sessions at once")
    parser.add_argument("--store", default="", help="a store URL (PostgreSQL) instead of SQLite")
    parser.add_argument(
        "--processes", type=int, default=0, help="worker processes (0: in this process)"
    )
    parser.add_argument(
        "--no-bare", action="store_true", help="skip bare DBOS's same work (prints no ratio)"
    )
    args = parse_with_quick(parser, sessions=200, window=10.0, active=60)
    home = Path(tempfile.mkdtemp(prefix="sd-scale-"))
    os.environ["SWARMDECK_HOME"] = str(home)
    if args.store:
        os.environ["SWARMDECK_STORE"] = args.store
    from fake_server import bench_provider, fake_llm_process, write_bench_provider

    from swarmdeck.config import load_settings
    from swarmdeck.runtime.host import Host

    workdir = home / "work"
    workdir.mkdir()
    with fake_llm_process(script(args.window, args.lead)) as base_url:
        write_bench_provider(home, base_url)
        host = Host(load_settings())
        host.services.providers.register(bench_provider(base_url))
        try:
            waited = waiting_on(host, args, home)
            bare = None if args.no_bare else bare_on(args, base_url)
            host.launch()  # after the workers: a launched host rings its own sessions only

            async def active() -> tuple[float, int, float]:
                try:
                    return await active_phase(host, args, workdir)
                finally:
                    await host.services.close_models()

            in_flight, peak, lag_p99 = asyncio.run(active())
        finally:
            host.shutdown()
    report(args, waited, bare, (in_flight, peak), lag_p99)


def bare_on(args: argparse.Namespace, base_url: str) -> dict[str, float]:
    """The same waiting work on bare DBOS, in as many processes (one for in-process)."""
    from scale_bare import bare_waiting

    from swarmdeck.config import load_settings

    half = args.sessions // 2
    spec = {
        "store": args.store,
        "base_url": base_url,
        "recv_poll": load_settings().recv_poll_seconds,
    }
    delays = [delay(i % TIMER_BUCKETS, args.window, args.lead) for i in range(half)]
    print(f"  bare DBOS: the same {args.sessions} waiting sessions", flush=True)
    measured = bare_waiting(spec, delays, args.sessions - half, max(1, args.processes), args.rate)
    return figures(measured)


def waiting_on(host: Any, args: argparse.Namespace, home: Path) -> dict[str, float]:
    """The waiting phase, in this process or on --processes workers (stopped after)."""
    from child_env import child_env
    from concurrency import start_workers, stop_workers

    if not args.processes:
        host.launch()
        return asyncio.run(_waiting_here(host, args, home / "work"))
    env = {**child_env(), "SWARMDECK_HOME": str(home)}
    if args.store:
        env["SWARMDECK_STORE"] = args.store
    workers = start_workers(args.processes, env, home)
    try:
        return asyncio.run(waiting_phase(Runners(host, workers), args, home / "work"))
    finally:
        stop_workers(workers)


async def _waiting_here(host: Any, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    try:
        return await waiting_phase(Runners(host), args, workdir)
    finally:
        await host.services.close_models()


def report(  # type: ignore[no-untyped-def]
    args,
    waited: dict[str, float],
    bare: dict[str, float] | None,
    flight: tuple[float, int],
    lag_p99: float,
) -> None:
    """The figures against issue 35's goals, then the closing line."""
    store = "PostgreSQL" if args.store else "SQLite"
    n = args.sessions
    scaled = waited["per_session_kib"] * 10_000 / 1024
    where = f"{args.processes} worker processes" if args.processes else "one process"
    lead = f" after {args.lead:g} s" if args.lead else ""
    print(f"store: {store}, {where}; {n} waiting sessions, timers over {args.window:g} s{lead}")
    print(
        f"  memory: {waited['per_session_kib']:.0f} KiB/waiting session, "
        f"{waited['rss']:.0f} MiB in all;\n  10,000 would add {scaled:.0f} MiB "
        f"(goal <= {GOAL_RSS_MIB_10K} MiB)"
    )
    print(f"  timer lateness p95 {waited['timer_p95']:.2f} s (goal <= {GOAL_TIMER_P95_S:g} s)")
    print(
        f"  message -> answer stored p95 {waited['message_p95']:.0f} ms at "
        f"{args.rate:g}/s (goal <= {GOAL_MESSAGE_P95_MS} ms),\n  "
        f"{waited['message_cpu_ms']:.1f} ms of CPU per message in the session runners, "
        "timers included"
    )
    if bare is not None:
        print_bare(waited, bare)
    in_flight, peak = flight
    print(
        f"  turns of {TURN_LATENCY_S * 1000:.0f} ms: {peak} in flight at once at the peak "
        f"(goal >= {GOAL_IN_FLIGHT}), {in_flight:.0f} on average over the run,\n  loop lag "
        f"p99 {lag_p99:.1f} ms (goal <= {GOAL_LAG_P99_MS} ms)"
    )
    print(
        f"scale: {n} waiting, RSS {waited['rss']:.0f} MiB, timer p95 "
        f"{waited['timer_p95']:.2f} s, message p95 {waited['message_p95']:.0f} ms"
    )


def print_bare(waited: dict[str, float], bare: dict[str, float]) -> None:
    """Bare DBOS's figures for the same waiting work, and ours against them."""
    print(
        f"  bare DBOS, same work: {bare['per_session_kib']:.0f} KiB/waiting session, "
        f"{bare['rss']:.0f} MiB in all;\n  timer p95 {bare['timer_p95']:.2f} s, message p95 "
        f"{bare['message_p95']:.0f} ms, {bare['message_cpu_ms']:.1f} ms of CPU per message"
    )

    def ratio(key: str) -> str:
        return f"{waited[key] / bare[key]:.2f}x" if bare[key] > 0 else "n/a"

    print(
        f"  swarmdeck / bare DBOS: memory per session {ratio('per_session_kib')}, "
        f"CPU per message {ratio('message_cpu_ms')},\n  timer p95 {ratio('timer_p95')}, "
        f"message p95 {ratio('message_p95')}"
    )


if __name__ == "__main__":
    main()
