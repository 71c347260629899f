"""`swarmdeck run`: one session in this process, progress on stderr, the answer on stdout."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from swarmdeck.cli.app import app
from swarmdeck.models.reach import check_reachable
from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.ui.progress import ProgressPrinter


async def run_and_follow(host: Host, session_id: str, quiet: bool = False) -> dict[str, Any]:
    """Run a session to its end in this process, printing progress unless quiet."""
    await host.start(session_id)
    outcome = asyncio.ensure_future(host.wait(session_id))
    printer = ProgressPrinter()
    await host.follow(session_id, (lambda _ev: None) if quiet else printer, outcome)
    return outcome.result() or {}


def exit_code_for(status: str) -> int:
    """0 for a completed session, 3 for one that ended otherwise."""
    return 0 if status == "completed" else 3


@app.command()
def run(
    task: Annotated[str, typer.Argument(help="What the agent should do.")],
    model: Annotated[
        str, typer.Option("--model", "-m", help="provider:model, e.g. openai:gpt-4.1")
    ] = "openai",
    workdir: Annotated[Path, typer.Option("--workdir", "-C", help="Directory to work in.")] = Path(
        "."
    ),
    mode: Annotated[str, typer.Option(help="agent, code, explore, test or review.")] = "agent",
    max_turns: Annotated[int, typer.Option(help="Stop after this many model turns.")] = 50,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
) -> None:
    """Run one agent session; progress goes to stderr, the final answer to stdout."""
    host = Host()
    request = SessionRequest(task, model, workdir, mode=mode, options={"max_turns": max_turns})
    host.check_request(request)
    config, _ = host.services.provider_for(model)
    asyncio.run(check_reachable(config.base_url, config.key))
    record = host.create_session(request)

    async def go() -> dict[str, Any]:
        try:
            return await run_and_follow(host, record.id, quiet)
        finally:
            host.shutdown()

    outcome = asyncio.run(go())
    final = host.catalog.get_session(record.id)
    print(final.final_text or "", file=sys.stdout)
    print(f"session {final.id}: {final.status}", file=sys.stderr)
    raise typer.Exit(exit_code_for(outcome.get("status", final.status)))
