"""`swarmdeck worker`: a long-running process that runs sessions and takes over dead ones."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated

import typer
from rich.console import Console

from swarmdeck.cli.app import app
from swarmdeck.runtime.host import Host

RECOVERY_SECONDS = 5.0


@app.command()
def worker(
    once: Annotated[
        bool, typer.Option(help="Recover dead workers' sessions, run until idle, then exit.")
    ] = False,
) -> None:
    """Run sessions from the shared store; resume the sessions of workers that died."""
    console = Console(stderr=True)
    host = Host()
    engine = host.launch()
    console.print(f"worker {engine.executor_id} on {host.settings.store_url.split('@')[-1]}")

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        while not stop.is_set():
            claimed = await asyncio.to_thread(engine.recover_dead_workers)
            if claimed:
                console.print(f"took over the sessions of {', '.join(claimed)}")
            if once:
                await asyncio.sleep(RECOVERY_SECONDS)
                return
            try:
                await asyncio.wait_for(stop.wait(), RECOVERY_SECONDS)
            except TimeoutError:
                continue

    try:
        asyncio.run(serve())
    finally:
        host.shutdown()
