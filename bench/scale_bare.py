"""Bare DBOS doing bench/scale.py's waiting work: the floor its figures are read against.

A bare session does what one of scale.py's does, with DBOS and aiohttp alone: a timer
session calls the model, sleeps (DBOS.sleep_async) until its bucket is due and calls it
again; an inbox session calls the model, waits for a message (DBOS.recv_async) and
answers it with a second call. The sessions run in child processes on a store of their
own (a fresh SQLite file, or a fresh database on the PostgreSQL server), and this process
sends the messages at the same rate with DBOS's client. Measured as scale.py measures
ours: the children's RSS per waiting session and in all, timer lateness p95, message ->
answer p95, and the children's CPU per message while the messages are answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from bare_http import http_turn
from dbos import DBOS, SetWorkflowID

TOPIC = "mail"
READY_S = 120
# Sessions per start_workflow_async burst: ours are handed over in batches of 500 too.
START_BATCH = 500

_session: Any = None
_reached = 0


async def _llm(url: str) -> float:
    """One streamed call through aiohttp; when it ended."""
    import aiohttp

    global _session
    if _session is None:
        _session = aiohttp.ClientSession()
    body = {"model": "bench", "messages": [{"role": "user", "content": "inbox "}], "stream": True}
    await http_turn((_session, url), body)
    return time.time()


@DBOS.workflow(name="bench.scale.timer")
async def timer_session(url: str, seconds: float) -> float:
    """Call, sleep, call: how late the sleep woke (s)."""
    global _reached
    asked = await DBOS.run_step_async({"name": "llm"}, _llm, url)
    _reached += 1
    await DBOS.sleep_async(seconds)
    woke = time.time()
    await DBOS.run_step_async({"name": "llm"}, _llm, url)
    return max(0.0, woke - asked - seconds)


@DBOS.workflow(name="bench.scale.inbox")
async def inbox_session(url: str) -> float:
    """Call, wait for a message, answer it: message -> answer (ms)."""
    global _reached
    await DBOS.run_step_async({"name": "llm"}, _llm, url)
    _reached += 1
    sent = await DBOS.recv_async(TOPIC, timeout_seconds=3600)
    done = await DBOS.run_step_async({"name": "llm"}, _llm, url)
    return (done - float(sent)) * 1000


def child(spec: dict[str, Any]) -> None:
    """One bare process: launch, say "ready", start its sessions at "go", say "waiting"
    with its inbox sessions' ids once all wait, "answered" once those answered, then
    "done" with the figures."""
    launch_bare(spec["store"], "bench-scale-bare", spec["recv_poll"])
    print("ready", flush=True)
    sys.stdin.readline()
    asyncio.run(_run(spec))
    DBOS.destroy()


def launch_bare(store: str, name: str, recv_poll: float | None = None) -> None:
    """Launch DBOS on the store as swarmdeck's engine configures it (its threads, SQLite's
    WAL), nothing else; `recv_poll` is its notification poll (s), DBOS's own when None."""
    from swarmdeck.catalog.db import create_db_engine

    config: dict[str, Any] = {
        "name": name,
        "system_database_url": store,
        "executor_id": f"bare-{os.getpid()}",
        "max_executor_threads": 8,  # as swarmdeck's engine
        "log_level": "WARNING",
    }
    if recv_poll is not None:
        config["notification_listener_polling_interval_sec"] = recv_poll
    if store.startswith("sqlite"):
        config["system_database_engine"] = create_db_engine(store)  # WAL + NORMAL, as ours
    DBOS(config=config)  # type: ignore[arg-type]
    DBOS.launch()


async def _run(spec: dict[str, Any]) -> None:
    url = f"{spec['base_url']}/chat/completions"
    timers = []
    for at in range(0, len(spec["timers"]), START_BATCH):
        timers += await asyncio.gather(
            *(
                DBOS.start_workflow_async(timer_session, url, seconds)
                for seconds in spec["timers"][at : at + START_BATCH]
            )
        )
    names = [f"bare-inbox-{uuid.uuid4().hex[:12]}" for _ in range(spec["inboxes"])]
    inboxes = []
    for name in names:
        with SetWorkflowID(name):
            inboxes.append(await DBOS.start_workflow_async(inbox_session, url))
    while _reached < len(timers) + len(inboxes):
        await asyncio.sleep(0.1)
    print("waiting " + json.dumps(names), flush=True)
    messages = await asyncio.gather(*(h.get_result() for h in inboxes))
    print("answered", flush=True)
    late = await asyncio.gather(*(h.get_result() for h in timers))
    print("done " + json.dumps({"late": late, "messages": messages}), flush=True)
    if _session is not None:
        await _session.close()


def fresh_store(store: str) -> tuple[str, Any]:
    """A store of the bare run's own: a new SQLite file, or a new database on the given
    PostgreSQL server; with what drops it after (None for a file)."""
    if not store:
        return f"sqlite:///{tempfile.mkdtemp(prefix='sd-scale-bare-')}/bare.sqlite", None
    import sqlalchemy as sa

    url = sa.make_url(store)
    name = f"bare_{uuid.uuid4().hex[:10]}"
    server = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with server.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        server.dispose()

    return url.set(database=name).render_as_string(hide_password=False), drop


def _shares(items: list[Any], n: int) -> list[list[Any]]:
    """Items dealt out to n children in turn."""
    return [items[k::n] for k in range(n)]


def _line(proc: subprocess.Popen[str], word: str) -> str:
    """The rest of the child's next line, which must start with `word`."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(word):
        raise SystemExit(f"bare DBOS child {proc.pid} said {line!r}, not {word!r}")
    return line[len(word) :].strip()


def bare_waiting(
    spec: dict[str, Any], delays: list[float], inboxes: int, processes: int, rate: float
) -> dict[str, Any]:
    """The waiting phase on bare DBOS in `processes` children; `spec` holds the store
    (empty: SQLite), the fake server's base_url and the recv poll (s). Returns the RSS in
    all and per session, the timers' lateness (s) and the messages' latency (ms), and the
    CPU per message (ms)."""
    from dbos import DBOSClient
    from proc_stats import cpu_s, rss_mib

    store, drop = fresh_store(spec["store"])
    children: list[subprocess.Popen[str]] = []
    answered = False
    timer_shares = _shares(delays, processes)
    inbox_shares = _shares(list(range(inboxes)), processes)
    try:
        for timers, mine in zip(timer_shares, inbox_shares, strict=True):
            own = {**spec, "store": store, "timers": timers, "inboxes": len(mine)}
            children.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--child", json.dumps(own)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
            _line(children[-1], "ready")  # one at a time: the first one makes the schema
        before = sum(rss_mib(c.pid) for c in children)
        for c in children:
            assert c.stdin is not None
            c.stdin.write("go\n")
            c.stdin.flush()
        names = [json.loads(_line(c, "waiting")) for c in children]
        waiting_rss = sum(rss_mib(c.pid) for c in children)
        client = DBOSClient(system_database_url=store)
        cpu_before, first = sum(cpu_s(c.pid) for c in children), time.monotonic()
        order = [name for k in range(max(map(len, names))) for name in _column(names, k)]
        for n, name in enumerate(order):
            client.send(name, time.time(), TOPIC)
            time.sleep(max(0.0, first + (n + 1) / rate - time.monotonic()))
        for c in children:
            _line(c, "answered")
        cpu = sum(cpu_s(c.pid) for c in children) - cpu_before
        done = [json.loads(_line(c, "done")) for c in children]
        client.destroy()
        answered = True
    finally:
        for c in children:
            if not answered:
                c.kill()
            c.wait(timeout=60)
        if drop is not None:
            drop()
    return {
        "rss": waiting_rss,
        "per_session_kib": (waiting_rss - before) * 1024 / max(1, len(delays) + inboxes),
        "late": [x for d in done for x in d["late"]],
        "message_ms": [x for d in done for x in d["messages"]],
        "message_cpu_ms": cpu * 1000 / max(1, len(order)),
    }


def _column(names: list[list[str]], k: int) -> list[str]:
    """The k-th inbox session of each child (the messages go to the children in turn)."""
    return [mine[k] for mine in names if k < len(mine)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", required=True, help="the child's spec, as JSON")
    child(json.loads(parser.parse_args().child))
