"""`swarmdeck worker`: a long-running process that runs sessions and takes over dead ones."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from swarmdeck.cli.app import app
from swarmdeck.cli.hosting import session_host

if TYPE_CHECKING:
    # Types only: importing the engine costs every command ~0.5 s of start-up.
    from swarmdeck.runtime.engine import Engine
    from swarmdeck.runtime.host import Host

RECOVERY_SECONDS = 5.0
SETTLE_POLL_SECONDS = 0.1
# Statuses of a session that is doing something (a turn, a tool, a timer).
BUSY_STATUSES = ("pending", "running", "waiting")


@app.command()
def worker(
    once: Annotated[
        bool, typer.Option(help="Recover dead workers' sessions, run until idle, then exit.")
    ] = False,
    max_seconds: Annotated[
        float, typer.Option(min=0, help="With --once: exit after this long even if not idle.")
    ] = 600.0,
) -> None:
    """Run sessions from the shared store; resume the sessions of workers that died."""
    console = Console(stderr=True)
    host = session_host()
    engine = host.launch()
    console.print(f"worker {engine.executor_id} on {host.settings.store_url.split('@')[-1]}")

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await watch(stop)
        finally:
            await host.services.close_toolsets()

    async def watch(stop: asyncio.Event) -> None:
        from swarmdeck.runtime.system_agents import keep_system_agents

        while not stop.is_set():
            claimed = await asyncio.to_thread(engine.recover_dead_workers)
            if claimed:
                console.print(f"took over the sessions of {', '.join(claimed)}")
            for line in await keep_system_agents(host):
                console.print(line)
            if once:
                settled = await settle(host, engine, stop, max_seconds)
                if not settled:
                    console.print(f"still busy after {max_seconds:g} s; exiting anyway")
                return
            try:
                await asyncio.wait_for(stop.wait(), RECOVERY_SECONDS)
            except TimeoutError:
                continue

    try:
        asyncio.run(serve())
    finally:
        host.shutdown()


async def settle(host: Host, engine: Engine, stop: asyncio.Event, max_seconds: float) -> bool:
    """Wait until every started session rests or has ended; False on timeout or signal."""
    deadline = time.monotonic() + max_seconds
    while not stop.is_set() and time.monotonic() < deadline:
        if await quiet(host, engine):
            return True
        await asyncio.sleep(SETTLE_POLL_SECONDS)
    return False


async def quiet(host: Host, engine: Engine) -> bool:
    """True when no session has work to do: none busy, none about to wake on a message."""
    catalog = host.catalog
    for sid in catalog.live_session_ids():
        state = await engine.workflow_status(await engine.current_workflow(sid))
        if state == "ENQUEUED":
            return False  # recovered, not yet picked up
        if state != "PENDING":
            continue  # no workflow (never started), or it ended: nothing runs it
        # The inbox first, then the status: a session takes messages and turns `running`
        # in one transaction, so this order never sees "resting, nothing pending" while a
        # message it just took is still unanswered (the other order can).
        pending = catalog.pending_count(sid)
        answers = catalog.pending_count(sid, ["answer"])
        status = catalog.get_session(sid).status
        if status in BUSY_STATUSES:
            return False
        if (status == "idle" and pending) or (status == "input_required" and answers):
            return False
    return True
