"""What a person's message costs that wakes an idle session, against bare DBOS's recv + step.

A permanent agent mostly waits, and each message that wakes it is the work
bench/scale.py's message p95 is made of: at 50 messages a second, the CPU per message
decides whether two workers keep up. Here N sessions (`one_shot: false`) answer their task
and rest idle, not counted; then each is sent a message (stored, then rung, as `swarmdeck
send` does) and answers it. Counted per message, as bench/session_cost.py counts a
session: CPU of this process, SQL statements and commits on the store (the bench's own
polls excepted: they use the bare driver), by the function issuing them with
`--by-caller`. The same for bare DBOS: N workflows each waiting in `recv`, sent a message
with `DBOS.send`, each taking one step after it. It ends with
`per message: X ms CPU, N statements, M commits` (swarmdeck's).

    python bench/wake_cost.py [--sessions 300] [--store URL] [--by-caller]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from dbos import DBOS
from quick import parse_with_quick

sys.path.insert(0, str(Path(__file__).parent))

TOPIC = "bench.wake"
INBOX_TASK = "wake me "
POLL_S = 0.02


@DBOS.workflow(name="bench.wake.recv_then_step")
async def bare_waiter() -> None:
    await DBOS.recv_async(TOPIC, 600)
    await DBOS.run_step_async({"name": "answer"}, _noop)


async def _noop() -> None:
    return None


class Answers:
    """Counts of the sessions' answers, read with the bare driver so that the bench's own
    polling is not counted as the sessions' statements."""

    def __init__(self, store_url: str) -> None:
        self.store_url = store_url

    def count(self, query: str, ids: list[str]) -> int:
        marks = ", ".join("?" for _ in ids)
        if self.store_url.startswith("sqlite:///"):
            with sqlite3.connect(self.store_url[len("sqlite:///") :]) as conn:
                return conn.execute(query.format(marks=marks), ids).fetchone()[0]
        import psycopg

        with psycopg.connect(self.store_url, autocommit=True) as conn:
            sql = query.format(marks=marks.replace("?", "%s"))
            return conn.execute(sql, ids).fetchone()[0]  # type: ignore[index]

    async def until(self, query: str, ids: list[str], want: int, what: str) -> None:
        deadline = time.monotonic() + 300
        while await asyncio.to_thread(self.count, query, ids) < want:
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            await asyncio.sleep(POLL_S)


ANSWERED = "SELECT count(*) FROM sd_events WHERE kind = 'assistant' AND session_id IN ({marks})"
IDLE = "SELECT count(*) FROM sd_sessions WHERE status = 'idle' AND id IN ({marks})"


async def ours(host, answers: Answers, counter, workdir: Path, n: int):  # type: ignore[no-untyped-def]
    """Sessions answer their task and rest (not counted), then each is woken by a message;
    returns (CPU seconds, wall seconds) of the wakes."""
    from swarmdeck.runtime.host import SessionRequest

    request = SessionRequest(
        INBOX_TASK, "bench:scripted", workdir, tool_names=[], options={"one_shot": False}
    )
    ids = [host.create_session(request).id for _ in range(n)]
    await asyncio.gather(*(host.start(i) for i in ids))
    await answers.until(IDLE, ids, n, "every session to rest")
    # `idle` is stored with the turn that rests, before its wait begins: let every session
    # reach its wait, so that a wait begun before the message is not counted as the wake's.
    await asyncio.sleep(1.0)
    counter.on = True
    cpu0, t0 = time.process_time(), time.perf_counter()
    for sid in ids:
        host.send(sid, "one more thing")
        await host.ring(sid)
    await answers.until(ANSWERED, ids, 2 * n, "every session to answer its message")
    await answers.until(IDLE, ids, n, "every session to rest again")
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    counter.on = False
    await host.services.close_models()  # on this loop: the next run has a loop of its own
    return cpu, wall


async def bare(counter, n: int):  # type: ignore[no-untyped-def]
    """Bare DBOS: n workflows wait in recv (not counted), then each is sent a message."""
    handles = [await DBOS.start_workflow_async(bare_waiter) for _ in range(n)]
    await asyncio.sleep(1.0)  # every recv has taken its place
    counter.on = True
    cpu0, t0 = time.process_time(), time.perf_counter()
    for handle in handles:
        await DBOS.send_async(handle.workflow_id, "one more thing", TOPIC)
    await asyncio.gather(*(h.get_result() for h in handles))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    counter.on = False
    return cpu, wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=300)
    p.add_argument("--store", default="", help="a store URL (PostgreSQL) instead of SQLite")
    p.add_argument(
        "--by-caller", action="store_true", help="count statements by the function issuing them"
    )
    args = parse_with_quick(p, sessions=10)
    home = Path(tempfile.mkdtemp(prefix="sd-wake-"))
    os.environ["SWARMDECK_HOME"] = str(home)
    if args.store:
        os.environ["SWARMDECK_STORE"] = args.store
    from fake_server import bench_provider, fake_llm_process
    from session_cost import Counter, report

    from swarmdeck.config import load_settings
    from swarmdeck.runtime.host import Host

    turns = [{"text": "ready"}, {"text": "got it"}]
    script = {"scenarios": [{"match": INBOX_TASK, "turns": turns}]}
    workdir = home / "work"
    workdir.mkdir()
    n = args.sessions
    with fake_llm_process(script) as base_url:
        settings = load_settings()
        host = Host(settings)
        host.services.providers.register(bench_provider(base_url))
        host.launch()
        answers = Answers(settings.store_url)
        counter = Counter()
        counter.by_caller = args.by_caller
        try:
            # One of each first, not counted: imports, the model client, compiled statements.
            asyncio.run(ours(host, answers, counter, workdir, 1))
            asyncio.run(bare(counter, 1))
            counter.reset()
            bare_figures = report("bare DBOS (recv + step)", n, *_timed(bare(counter, n)), counter)
            counter.reset()
            woken = ours(host, answers, counter, workdir, n)
            ours_figures = report("swarmdeck (message + turn)", n, *_timed(woken), counter)
        finally:
            host.shutdown()
    print(f"swarmdeck / bare DBOS, CPU per message: {ours_figures[0] / bare_figures[0]:.2f}x")
    cpu_ms, statements, commits = ours_figures
    print(f"per message: {cpu_ms:.1f} ms CPU, {statements:.1f} statements, {commits:.1f} commits")


def _timed(run):  # type: ignore[no-untyped-def]
    """Run one measured part; returns its (CPU s, fake server CPU s) and wall s, as
    session_cost's report takes them."""
    from session_cost import children_cpu

    server0 = children_cpu()
    cpu, wall = asyncio.run(run)
    return (cpu, children_cpu() - server0), wall


if __name__ == "__main__":
    main()
