"""What one `wait(1)` + one-turn session costs, against bare DBOS's sleep + one step.

Runs N sessions in this process on a fresh SQLite store (as bench/concurrency.py does with
`--processes 0`), after one of each not counted (what a process does once: imports, its
model client), and counts, per session: CPU time of this process, SQL statements and
commits on the store (SQLAlchemy event hooks on the engine the catalog shares with DBOS),
DBOS steps (its operation_outputs rows) and LLM requests. The same for bare DBOS's
N x (sleep + one empty step) in the same run. The figures say where a session's CPU goes;
then `swarmdeck / bare DBOS, CPU per session: X.XXx`, the figures against issue 35's goals
(15 ms CPU, 25 statements, 8 commits), and last
`per session: X ms CPU, N statements, M commits` (swarmdeck's).

    python bench/session_cost.py [--sessions 300] [--wait 1]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import cProfile
import dataclasses
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from dbos import DBOS
from quick import parse_with_quick

sys.path.insert(0, str(Path(__file__).parent))


@DBOS.workflow(name="bench.cost.sleep_then_step")
async def bare_session(seconds: float) -> None:
    await DBOS.sleep_async(seconds)
    await DBOS.run_step_async({"name": "step"}, _noop)


async def _noop() -> None:
    return None


# Issue 35's goals per `wait(1)` + one-turn session: CPU ms, statements, commits.
GOALS = (15.0, 25.0, 8.0)


class Counter:
    """SQL statements (by verb and table) and commits on every engine of the process."""

    def __init__(self) -> None:
        import sqlalchemy as sa
        from sqlalchemy import event

        engine = sa.Engine  # every engine: the catalog's, its no-wait writer's, the limiter's

        self.statements: collections.Counter[str] = collections.Counter()
        self.callers: collections.Counter[str] = collections.Counter()
        self.by_caller = False
        self.commits = 0
        self.on = False

        @event.listens_for(engine, "before_cursor_execute")
        def _stmt(conn, cursor, statement, params, context, many):  # type: ignore[no-untyped-def]
            if self.on:
                self.statements[_shape(statement)] += 1
                if self.by_caller:
                    self.callers[f"{_shape(statement)} <- {_caller()}"] += 1

        @event.listens_for(engine, "commit")
        def _commit(conn):  # type: ignore[no-untyped-def]
            if self.on:
                self.commits += 1
                if self.by_caller:
                    self.callers[f"COMMIT <- {_caller()}"] += 1

    def reset(self) -> None:
        self.statements.clear()
        self.callers.clear()
        self.commits = 0


def _caller() -> str:
    """The innermost swarmdeck (or DBOS) function that issued the statement."""
    frame, names = sys._getframe(2), []
    while frame is not None and len(names) < 3:
        path = frame.f_code.co_filename
        if "/swarmdeck/" in path or ("/dbos/" in path and "_sys_db" not in path):
            names.append(f"{Path(path).stem}.{frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(names) or "?"


def _shape(statement: str) -> str:
    words = statement.split()
    verb = words[0].upper() if words else "?"
    table = re.search(r"(?:FROM|INTO|UPDATE)\s+\"?([\w.]+)", statement, re.I)
    return f"{verb} {table.group(1) if table else ''}".strip()


def report(
    name: str,
    n: int,
    cpu: tuple[float, float],
    wall: float,
    counter: Counter,
    ops: collections.Counter[str] | None = None,
) -> tuple[float, float, float]:
    """Print the figures of one run; returns its (CPU ms, statements, commits) per session
    (CPU of this process)."""
    stmts = sum(counter.statements.values())
    print(
        f"{name}: {n} sessions, wall {wall:.2f} s, CPU {cpu[0] * 1000 / n:.2f} ms/session "
        f"(+ {cpu[1] * 1000 / n:.2f} ms in the fake LLM server), "
        f"{stmts / n:.1f} statements, {counter.commits / n:.1f} commits"
        + (f", {sum(ops.values()):.1f} DBOS operations per session" if ops else "")
    )
    if ops:
        print("  DBOS operations: " + ", ".join(f"{k} {v:.2f}" for k, v in ops.most_common()))
    for shape, count in counter.statements.most_common(25):
        print(f"    {count / n:6.2f}  {shape}")
    for caller, count in counter.callers.most_common(40):
        print(f"    {count / n:6.2f}  {caller}")
    return cpu[0] * 1000 / n, stmts / n, counter.commits / n


def children_cpu() -> float:
    """CPU seconds used so far by this process's children (the fake LLM server): a remote
    LLM costs this machine nothing, the fake one shares its cores."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path("/proc/self/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:  # a thread that ended since the listing (DBOS's, the engine's)
            continue
        for pid in children:
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


def dbos_steps(engine, name: str, since_ms: int) -> collections.Counter[str]:  # type: ignore[no-untyped-def]
    """The recorded operations (steps, sleeps, recvs) of the named workflow's runs started
    since `since_ms` (the counted ones: not the warm-up's, nor, on a store given with
    --store, an earlier run's), by name, per run."""
    import sqlalchemy as sa

    schema = "dbos." if engine.dialect.name == "postgresql" else ""
    counted = "w.name = :name AND w.created_at >= :since"
    params = {"name": name, "since": since_ms}
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT o.function_name, count(*) FROM {schema}operation_outputs o JOIN "
                f"{schema}workflow_status w ON o.workflow_uuid = w.workflow_uuid "
                f"WHERE {counted} GROUP BY o.function_name"
            ),
            params,
        ).all()
        runs = conn.execute(
            sa.text(f"SELECT count(*) FROM {schema}workflow_status w WHERE {counted}"), params
        ).scalar_one()
    return collections.Counter({str(f): int(c) / max(1, runs) for f, c in rows})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=300)
    p.add_argument("--store", default="", help="a store URL (PostgreSQL) instead of SQLite")
    p.add_argument("--wait", type=float, default=1.0)
    p.add_argument(
        "--recv-poll", type=float, default=None, help="the engine's recv poll (s), to weigh it"
    )
    p.add_argument(
        "--profile",
        default="",
        help="profile ours into this file: cProfile stats (.pstats), else pyinstrument",
    )
    p.add_argument(
        "--by-caller", action="store_true", help="count statements by the function issuing them"
    )
    args = parse_with_quick(p, sessions=10, wait=0.2)
    home = Path(tempfile.mkdtemp(prefix="sd-cost-"))
    os.environ["SWARMDECK_HOME"] = str(home)
    if args.store:
        os.environ["SWARMDECK_STORE"] = args.store
    from fake_server import bench_provider, fake_llm_process

    from swarmdeck.config import load_settings
    from swarmdeck.runtime.host import Host, SessionRequest

    turns = [{"tool_calls": [{"name": "wait", "arguments": {"seconds": args.wait}}]}]
    script = {"scenarios": [{"turns": [*turns, {"text": "done"}]}]}
    workdir = home / "work"
    workdir.mkdir()
    n = args.sessions
    with fake_llm_process(script) as base_url:
        provider = bench_provider(base_url)
        settings = load_settings()
        if args.recv_poll is not None:
            settings = dataclasses.replace(settings, recv_poll_seconds=args.recv_poll)
        host = Host(settings)
        host.services.providers.register(provider)
        host.launch()
        counter = Counter()
        counter.by_caller = args.by_caller
        try:

            async def bare(n: int = n) -> float:
                t0 = time.perf_counter()
                handles = await asyncio.gather(
                    *(DBOS.start_workflow_async(bare_session, args.wait) for _ in range(n))
                )
                await asyncio.gather(*(h.get_result() for h in handles))
                return time.perf_counter() - t0

            async def ours(n: int = n) -> float:
                request = SessionRequest("bench", "bench:scripted", workdir, tool_names=["wait"])
                t0 = time.perf_counter()
                ids = [host.create_session(request).id for _ in range(n)]
                await asyncio.gather(*(host.start(i) for i in ids))
                outcomes = await asyncio.gather(*(host.wait(i) for i in ids))
                wall = time.perf_counter() - t0
                assert all(o.get("status") == "completed" for o in outcomes), outcomes[:3]
                await host.services.close_models()
                return wall

            # One of each first, not counted: what a process does once (imports, its
            # model client, statements compiled) is no session's cost.
            asyncio.run(bare(1))
            asyncio.run(ours(1))
            per_session: dict[str, tuple[float, float, float]] = {}
            for name, run, wf in (
                ("bare DBOS (sleep + step)", bare, "bench.cost.sleep_then_step"),
                ("swarmdeck (create + wait + 2 turns)", ours, "swarmdeck.session"),
            ):
                counter.reset()
                counter.on = True
                profiler = None
                if args.profile.endswith(".pstats") and run is ours:
                    profiler = cProfile.Profile()
                    profiler.enable()
                elif args.profile and run is ours:
                    from pyinstrument import Profiler

                    profiler = Profiler(async_mode="disabled")
                    profiler.start()
                since_ms = int(time.time() * 1000)
                cpu0, server0 = time.process_time(), children_cpu()
                wall = asyncio.run(run())
                cpu = (time.process_time() - cpu0, children_cpu() - server0)
                if isinstance(profiler, cProfile.Profile):
                    profiler.disable()
                    profiler.dump_stats(args.profile)
                elif profiler is not None:
                    profiler.stop()
                    Path(args.profile).write_text(
                        profiler.output_html()
                        if args.profile.endswith(".html")
                        else profiler.output_text(show_all=False, timeline=False)
                    )
                counter.on = False
                per_session[name] = report(
                    name, n, cpu, wall, counter, dbos_steps(host.catalog.engine, wf, since_ms)
                )
        finally:
            host.shutdown()
    bare, ours = per_session.values()
    print(f"swarmdeck / bare DBOS, CPU per session: {ours[0] / bare[0]:.2f}x")
    for what, got, goal, unit in zip(
        ("CPU", "statements", "commits"), ours, GOALS, ("ms", "", ""), strict=True
    ):
        verdict = "met" if got <= goal else "NOT met"
        print(f"  goal {what} <= {goal:g}{unit}: {got:.1f}{unit} ({verdict})")
    print(f"per session: {ours[0]:.1f} ms CPU, {ours[1]:.1f} statements, {ours[2]:.1f} commits")


if __name__ == "__main__":
    main()
