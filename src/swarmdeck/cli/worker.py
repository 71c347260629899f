"""`swarmdeck worker`: a process of the fleet. It runs the sessions handed to the fleet (and
the queue's), takes over the sessions of workers whose lease lapsed, and with
`--processes N` supervises N such processes."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from swarmdeck.cli.app import app
from swarmdeck.cli.hosting import session_host
from swarmdeck.errors import UsageError
from swarmdeck.runtime.heap import REFREEZE_SECONDS, HeapFreezer

if TYPE_CHECKING:
    # Types only: importing the engine costs every command ~0.5 s of start-up.
    from swarmdeck.runtime.duties import Duty
    from swarmdeck.runtime.engine import Engine
    from swarmdeck.runtime.host import Host

SETTLE_POLL_SECONDS = 0.1
# Statuses of a session that is doing something (a turn, a tool, a timer).
BUSY_STATUSES = ("pending", "running", "waiting")
# How often a worker checks that the store's enabled system agents run (a check costs one
# read on a store without any).
SYSTEM_AGENTS_SECONDS = 2.0
# How often, and at most how long after its start, a worker checks whether it may import
# the model SDKs yet (ModelWarmup).
WARMUP_POLL_SECONDS = 0.05
WARMUP_WITHIN_SECONDS = 3.0
# Exit code of a worker that found its lease taken over and was told not to start again.
EXIT_LEASE_LOST = 75


@app.command()
def worker(
    once: Annotated[
        bool, typer.Option(help="Recover dead workers' sessions, run until idle, then exit.")
    ] = False,
    max_seconds: Annotated[
        float, typer.Option(min=0, help="With --once: exit after this long even if not idle.")
    ] = 600.0,
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes",
            "-n",
            help="Supervise this many worker processes (each its own executor), restarting "
            "any that dies; the count can be changed later in the store (sd_supervisors).",
        ),
    ] = None,
) -> None:
    """Serve the store as a fleet worker: run the sessions handed to it, take over those of
    workers that died. Start one per terminal or machine, or `--processes N`."""
    if max_seconds <= 0:
        raise UsageError("--max-seconds must be positive", "e.g. --max-seconds 60")
    if processes is not None:
        if processes < 1 or once:
            raise UsageError(
                "--processes takes a count of at least 1, without --once",
                "e.g. `swarmdeck worker --processes 2`",
            )
        from swarmdeck.runtime.supervisor import supervise

        sys.exit(supervise(processes, Console(stderr=True).print))
    console = Console(stderr=True)
    from swarmdeck.models.available import ready_providers
    from swarmdeck.models.factory import preload_adapters

    host = session_host(role="worker")
    engine = host.launch()
    ready = ready_providers(host.services.providers, host.services.credentials.has)
    heap = HeapFreezer()

    def warm() -> None:
        preload_adapters(ready)
        heap.refreeze()  # the SDKs were the last of start-up

    warmup = ModelWarmup(engine, warm)
    where = host.settings.store_url.split("@")[-1]
    console.print(f"worker {engine.executor_id} on {where}")
    engine.on_lease_lost = lambda: _lease_lost(engine, console, once)
    try:
        asyncio.run(_serve(host, engine, warmup, heap, console, once, max_seconds))
    finally:
        host.shutdown()


async def _serve(
    host: Host,
    engine: Engine,
    warmup: ModelWarmup,
    heap: HeapFreezer,
    console: Console,
    once: bool,
    max_s: float,
) -> None:
    from swarmdeck.catalog.catalog import HANDOVER_CHANNEL, MAIL_CHANNEL
    from swarmdeck.catalog.notify import listen
    from swarmdeck.runtime.duties import Duty, fleet_loop
    from swarmdeck.runtime.system_agents import keep_system_agents

    async def keep_system() -> None:
        for line in await keep_system_agents(host):
            console.print(line)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if once:
            claimed = await asyncio.to_thread(engine.recover_dead_workers)
            if claimed:
                console.print(f"took over the sessions of {', '.join(claimed)}")
            await asyncio.to_thread(engine.take_handovers)
            warmup.start()
            await keep_system()
            if not await settle(host, engine, stop, max_s):
                console.print(f"still busy after {max_s:g} s; exiting anyway")
            return
        notified = not host.settings.is_sqlite
        duties, handover, hear_mail = fleet_loop(engine, console.print, notified)
        duties.add(Duty("keep system agents", SYSTEM_AGENTS_SECONDS, keep_system))
        warmup.duty = duties.add(Duty("warm the model SDKs", WARMUP_POLL_SECONDS, warmup.poll))
        duties.add(Duty("keep the heap frozen", REFREEZE_SECONDS, heap.run))
        listener = None
        if notified:
            listener = listen(
                host.settings.store_url,
                {
                    HANDOVER_CHANNEL: lambda _note: duties.wake(handover),
                    MAIL_CHANNEL: hear_mail,
                },
            )
        try:
            await duties.serve(stop)
        finally:
            if listener is not None:
                listener.set()
    finally:
        # The MCP servers this worker started, and the adapters' pools.
        await host.services.aclose()


class ModelWarmup:
    """Imports the model SDKs in a thread, ahead of the first turn that needs them (else
    that turn imports on the event loop every session shares), but only once the sessions
    taken over at start began their new execution: the import holds the GIL those need (a
    restart resumed 100 sessions in 1.0 s beside it, in 0.3 s without)."""

    def __init__(self, engine: Engine, preload: Callable[[], None]) -> None:
        self.engine = engine
        self.preload = preload
        self.latest = time.monotonic() + WARMUP_WITHIN_SECONDS
        self.duty: Duty | None = None
        self.started = False

    async def poll(self) -> None:
        """Start the import once nothing taken over waits to begin (or at the latest)."""
        if time.monotonic() < self.latest and await asyncio.to_thread(self.engine.resuming):
            return
        self.start()

    def start(self) -> None:
        """Start the import now (once)."""
        if self.duty is not None:
            self.duty.every_s = math.inf  # done: the duty loop need not come back
        if not self.started:
            self.started = True
            threading.Thread(target=self.preload, name="sd-warmup", daemon=True).start()


def _lease_lost(engine: Engine, console: Console, once: bool) -> None:
    """This process was presumed dead (paused past its lease, cut off from the store) and
    its sessions were taken over: whatever it still runs is fenced off, so start afresh,
    as a new executor. (Runs in the heartbeat thread.)"""
    console.print(
        f"worker {engine.executor_id} lost its lease (paused or cut off for longer than "
        f"{engine.services.settings.lease_seconds:g} s); its sessions run elsewhere now"
    )
    sys.stdout.flush()
    sys.stderr.flush()
    if once:
        os._exit(EXIT_LEASE_LOST)
    console.print("starting again as a new worker")
    os.execv(sys.executable, [sys.executable, "-m", "swarmdeck", *sys.argv[1:]])


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
    # Read in threads: the sessions this worker runs share the loop this polls on.
    for sid in await asyncio.to_thread(host.catalog.live_session_ids):
        state = await engine.workflow_status(await engine.current_workflow(sid))
        if state == "ENQUEUED":
            return False  # recovered, not yet picked up
        if state != "PENDING":
            continue  # no workflow (never started), or it ended: nothing runs it
        if await asyncio.to_thread(_has_work, host, sid):
            return False
    return True


def _has_work(host: Host, sid: str) -> bool:
    """Whether a session that a workflow runs is busy or about to wake on a message."""
    catalog = host.catalog
    # The inbox first, then the status: a session takes messages and turns `running` in
    # one transaction, so this order never sees "resting, nothing pending" while a message
    # it just took is still unanswered (the other order can).
    pending = catalog.pending_count(sid)
    answers = catalog.pending_count(sid, ["answer"])
    status = catalog.get_session(sid).status
    if status in BUSY_STATUSES:
        return True
    return (status == "idle" and bool(pending)) or (status == "input_required" and bool(answers))
