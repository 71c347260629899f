"""1,000 concurrent sessions, each `wait(1)` then one more turn, on one machine.

Each session's model asks for wait(1) in its first turn, sleeps durably for one second, and
answers in its second turn: two LLM calls against the fake server (zero latency, in its own
process, as a remote LLM would be). The ideal wall time is the 1 s wait.

Ours is measured in this process (`--processes 0`: the sessions start here) and on the
fleet (`--processes N`: N `swarmdeck worker` processes serve the store and the sessions are
handed to them; a list such as `--processes 0,1,2` measures each, to show how throughput
scales). The same run measures three bare-DBOS peers in this process: 1,000 x (sleep 1 s +
one step), the figure in DBOS-NOTES.md; 1,000 x (one step calling the LLM through the
OpenAI SDK, sleep 1 s, one step calling the LLM), the same work without the runtime; and
that work with aiohttp alone in place of the SDK, its floor: what any client of the wire
format spends on DBOS. For each N > 0, bare DBOS's sleep + step is also run in N processes
on one store, as our fleet's N workers were, and the ratio at equal processes is printed.
Printed: wall times, ratios, throughput, peak memory of every process involved. The last
line compares our best run with bare DBOS's sleep + step (goal: at most 1.5x, on SQLite,
under 1 GiB in all).

    python bench/concurrency.py [--sessions 1000] [--processes 0,2] [--store postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bare_http import http_turn
from dbos import DBOS
from quick import parse_with_quick

GOAL_RATIO = 1.5
GOAL_MEMORY_MIB = 1024
WORKER_READY_S = 120.0
BARE_CHILD = [sys.executable, __file__, "--bare-child"]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--wait", type=float, default=1.0)
    p.add_argument(
        "--processes",
        default="0",
        help="comma-separated worker counts; 0 runs the sessions in this process",
    )
    p.add_argument("--store", default=None, help="postgresql://... (default: a fresh SQLite file)")
    p.add_argument(
        "--ours-only",
        action="store_true",
        help="skip the bare-DBOS peers (to profile ours); prints no ratio",
    )
    p.add_argument("--bare-child", type=int, default=0, help=argparse.SUPPRESS)
    return parse_with_quick(p, sessions=10, wait=0.2, processes="0,1")


@DBOS.workflow(name="bench.sleep_then_step")
async def bare_session(seconds: float) -> None:
    await DBOS.sleep_async(seconds)
    await DBOS.run_step_async({"name": "step"}, _noop)


@DBOS.workflow(name="bench.llm_sleep_llm")
async def bare_same_work(base_url: str, seconds: float) -> None:
    await DBOS.run_step_async({"name": "llm"}, _llm, base_url, 0)
    await DBOS.sleep_async(seconds)
    await DBOS.run_step_async({"name": "llm"}, _llm, base_url, 1)


@DBOS.workflow(name="bench.llm_sleep_llm_http")
async def bare_same_work_http(base_url: str, seconds: float) -> None:
    await DBOS.run_step_async({"name": "llm"}, _llm_http, base_url, 0)
    await DBOS.sleep_async(seconds)
    await DBOS.run_step_async({"name": "llm"}, _llm_http, base_url, 1)


# One client (and connection pool) for all calls of a peer, as ours has; closed by bare().
_CLIENTS: dict[str, Any] = {}


def _messages(turn: int) -> list[dict[str, Any]]:
    """The conversation of a session's first or second call, as ours sends it."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "bench"}]
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
    return messages


async def _llm(base_url: str, turn: int) -> str:
    import openai

    from swarmdeck.models.retry import pooled_client_factory

    client = _CLIENTS.get(base_url)
    if client is None:
        client = _CLIENTS[base_url] = openai.AsyncOpenAI(
            base_url=base_url,
            api_key="b",
            max_retries=0,
            timeout=120,
            http_client=pooled_client_factory(openai)(),  # the transport ours uses
        )
    stream = await client.chat.completions.create(
        model="bench", messages=_messages(turn), stream=True, stream_options={"include_usage": True}
    )
    async for _ in stream:
        pass
    return "ok"


async def _llm_http(base_url: str, turn: int) -> str:
    """The same call with aiohttp alone: no SDK, the floor of any client."""
    import aiohttp

    key = f"aiohttp {base_url}"
    session = _CLIENTS.get(key)
    if session is None:
        session = _CLIENTS[key] = aiohttp.ClientSession()
    body = {
        "model": "bench",
        "messages": _messages(turn),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    await http_turn((session, f"{base_url}/chat/completions"), body)
    return "ok"


async def _noop() -> None:
    return None


def peak_rss_mib(pid: int | None = None) -> float:
    """Peak resident memory of a process (this one by default)."""
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Run:
    """One measured run of ours."""

    processes: int
    wall: float
    created: float
    memory_mib: float
    # Sessions each worker ran, most first (empty in-process): an uneven split leaves a
    # core idle while the busier worker finishes.
    split: list[int] = field(default_factory=list)

    def detail(self) -> str:
        """'(creating the sessions: 0.30 s of it, sessions per worker 700/300)'."""
        split = f", sessions per worker {'/'.join(map(str, self.split))}" if self.split else ""
        return f"(creating the sessions: {self.created:.2f} s of it{split})"


def start_workers(n: int, env: dict[str, str], home: Path) -> list[subprocess.Popen[bytes]]:
    """n `swarmdeck worker` processes, once each serves the store."""
    procs = []
    for i in range(n):
        log = home / f"worker-{i}.log"
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "swarmdeck", "worker"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
            )
        )
    deadline = time.monotonic() + WORKER_READY_S
    for i, proc in enumerate(procs):
        log = home / f"worker-{i}.log"
        while "worker " not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {i} did not start:\n{log.read_text()}")
            time.sleep(0.05)
    return procs


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> float:
    """Stop the workers; returns their summed peak memory (MiB)."""
    memory = sum(peak_rss_mib(p.pid) for p in procs)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=60)
    return memory


def bare_child(store_url: str, sessions: int, seconds: float) -> None:
    """One of N bare-DBOS processes on one store: launch, say so, wait for the go, run
    `sessions` x (sleep + step), print the wall time."""
    from scale_bare import launch_bare

    launch_bare(store_url, "bench-bare")
    print("ready", flush=True)
    sys.stdin.readline()

    async def run() -> float:
        t0 = time.perf_counter()
        handles = await asyncio.gather(
            *(DBOS.start_workflow_async(bare_session, seconds) for _ in range(sessions))
        )
        await asyncio.gather(*(h.get_result() for h in handles))
        return time.perf_counter() - t0

    wall = asyncio.run(run())
    print(f"done {wall}", flush=True)
    DBOS.destroy()


def bare_in_processes(processes: int, sessions: int, seconds: float, store: str | None) -> float:
    """Bare DBOS's sleep + step in `processes` processes on one store (a fresh SQLite file
    unless a store is given), the sessions shared out: the wall time from the go, given to
    all at once after they launched, to the last one's end."""
    url = store or f"sqlite:///{tempfile.mkdtemp(prefix='sd-bare-')}/bare.sqlite"
    share = [sessions // processes + (i < sessions % processes) for i in range(processes)]
    children = []
    for k in share:  # one at a time: the first one creates the schema
        child = subprocess.Popen(
            [*BARE_CHILD, str(k), "--wait", str(seconds), "--store", url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        children.append(child)
    t0 = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("done"), line
    wall = time.perf_counter() - t0
    for child in children:
        child.wait(timeout=60)
    return wall


def main() -> None:
    args = parse_args()
    if args.bare_child:
        bare_child(args.store, args.bare_child, args.wait)
        return
    home = Path(tempfile.mkdtemp(prefix="sd-conc-"))
    os.environ["SWARMDECK_HOME"] = str(home)
    if args.store:
        os.environ["SWARMDECK_STORE"] = args.store
    from child_env import child_env
    from fake_server import bench_provider, fake_llm_process, write_bench_provider

    from swarmdeck.config import load_settings
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
    counts = [int(n) for n in args.processes.split(",")]
    n = args.sessions
    with fake_llm_process(script) as base_url:
        provider = bench_provider(base_url)
        write_bench_provider(home, base_url)
        host = Host(load_settings())
        host.services.providers.register(provider)
        host.launch()
        env = child_env()
        env["SWARMDECK_HOME"] = str(home)
        if args.store:
            env["SWARMDECK_STORE"] = args.store

        def request() -> SessionRequest:
            return SessionRequest("bench", "bench:scripted", workdir, tool_names=["wait"])

        async def run_here() -> Run:
            # From before the sessions are created, as on the fleet (where creating one is
            # submitting it) and as bare DBOS's start creates its workflows.
            t0 = time.perf_counter()
            ids = [r.id for r in host.create_sessions([request() for _ in range(n)])]
            created = time.perf_counter() - t0
            await asyncio.gather(*(host.start(i) for i in ids))
            outcomes = await asyncio.gather(*(host.wait(i) for i in ids))
            wall = time.perf_counter() - t0
            bad = [o for o in outcomes if o.get("status") != "completed"]
            assert not bad, bad[:3]
            await host.services.close_models()  # the pools of this loop
            return Run(0, wall, created, 0.0)

        def run_fleet(processes: int) -> Run:
            workers = start_workers(processes, env, home)
            try:
                t0 = time.perf_counter()
                # At once, as the SDK's Swarm.start_all hands them over (one transaction).
                requests = [request() for _ in range(n)]
                ids = [r.id for r in host.create_sessions(requests, fleet=True)]
                created = time.perf_counter() - t0
                left = set(ids)
                while left:
                    time.sleep(0.05)
                    # One query a poll: reading each session (1,000 reads every 50 ms) took
                    # this process most of a core, which the workers it measures share.
                    left &= set(host.catalog.live_session_ids())
                wall = time.perf_counter() - t0
                records = [host.catalog.get_session(i) for i in ids]
                bad = [r.id for r in records if r.status != "completed"]
                assert not bad, bad[:3]
                split = sorted(Counter(r.executor for r in records).values(), reverse=True)
            finally:
                memory = stop_workers(workers)
            return Run(processes, wall, created, memory, split)

        async def bare(workflow, *wf_args) -> float:  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            handles = await asyncio.gather(
                *(DBOS.start_workflow_async(workflow, *wf_args) for _ in range(n))
            )
            await asyncio.gather(*(h.get_result() for h in handles))
            wall = time.perf_counter() - t0
            while _CLIENTS:  # its pool belongs to this loop: close it here
                await _CLIENTS.popitem()[1].close()
            return wall

        try:
            if not args.ours_only:
                bare_step = asyncio.run(bare(bare_session, args.wait))
                same = asyncio.run(bare(bare_same_work, base_url, args.wait))
                floor = asyncio.run(bare(bare_same_work_http, base_url, args.wait))
            runs = []
            for processes in counts:
                runs.append(asyncio.run(run_here()) if processes == 0 else run_fleet(processes))
        finally:
            host.shutdown()
    if args.ours_only:
        for run in runs:
            print(
                f"  swarmdeck, {run.processes} worker process(es) (0: here) {run.wall:7.2f} s",
                run.detail(),
            )
        return
    # Bare DBOS given the processes our fleet runs got (after the host stopped, as the
    # fleet's workers run without it).
    bare_fleet = {
        p: bare_in_processes(p, n, args.wait, args.store) for p in sorted(set(counts) - {0})
    }
    here_mib = peak_rss_mib()
    store = "PostgreSQL" if args.store else "SQLite (WAL, synchronous=NORMAL)"
    print(f"store: {store}; {n} concurrent sessions, each wait({args.wait:g}) then one turn")
    floor_note = f"its floor: {floor / bare_step:.2f}x bare sleep + step"
    peers = [
        (f"{n} x (sleep + one step)", bare_step, ""),
        (f"{n} x (LLM step, sleep, LLM step)", same, "the same work"),
        (f"{n} x (the same, aiohttp for the SDK)", floor, floor_note),
        *((f"{n} x (sleep + one step), {p} process(es)", w, "") for p, w in bare_fleet.items()),
    ]
    for what, wall, note in peers:
        print(f"  {'bare DBOS, ' + what:<52} {wall:7.2f} s" + (f"   ({note})" if note else ""))
    for run in runs:
        where = "in this process" if run.processes == 0 else f"{run.processes} worker process(es)"
        memory = here_mib + run.memory_mib
        print(
            f"  swarmdeck, {where:<24} {run.wall:7.2f} s   {n / run.wall:5.0f} sessions/s, "
            f"{run.wall / bare_step:.2f}x bare sleep + step, {run.wall / same:.2f}x the same work "
            f"({run.wall / floor:.2f}x its floor), "
            f"{memory:5.0f} MiB {run.detail()}"
        )
    for run in runs:
        if run.processes in bare_fleet:
            print(
                f"  at equal processes ({run.processes}): swarmdeck / bare DBOS (sleep + step) "
                f"{run.wall / bare_fleet[run.processes]:.2f}x"
            )
    best = min(runs, key=lambda r: r.wall)
    total = here_mib + best.memory_mib
    where = "in this process" if best.processes == 0 else f"{best.processes} worker process(es)"
    print(
        f"  best: {where}; peak memory of all processes {total:.0f} MiB (goal < {GOAL_MEMORY_MIB})"
    )
    print(f"  swarmdeck / bare DBOS (sleep + step): {best.wall / bare_step:.2f}x")
    ratio = best.wall / floor
    verdict = "met" if ratio <= GOAL_RATIO else "NOT met"
    print(f"  goal (issue 35): at most {GOAL_RATIO:g}x the same work on bare DBOS ({verdict})")
    print(f"swarmdeck / same work on bare DBOS: {ratio:.2f}x")


if __name__ == "__main__":
    main()
