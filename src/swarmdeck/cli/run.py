"""`swarmdeck run`: one run with progress on stderr.

Two forms. The contract form (`--provider P --mode M --workdir D --task T`) is `dispatch`
for humans: progress on stderr, the verdict as the one line on stdout, exit 124 on a
timeout. The short form (`swarmdeck run "TASK" --model provider:model`) runs a plain agent
session and prints its final answer on stdout.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from swarmdeck.cli.app import app
from swarmdeck.cli.dispatch import (
    DetachOpt,
    DryRunOpt,
    HumanCommand,
    IdleTimeoutOpt,
    LocalOpt,
    MaxStepsOpt,
    ModeOpt,
    ProviderOpt,
    QuietOpt,
    SessionOpt,
    TaskFileOpt,
    TaskOpt,
    TimeoutOpt,
    WorkdirOpt,
    WorktreeOpt,
)
from swarmdeck.errors import UsageError

LEGACY_MAX_TURNS = 50


async def run_and_follow(host: Any, session_id: str, quiet: bool = False) -> dict[str, Any]:
    """Run a session to its end in this process, printing progress unless quiet."""
    from swarmdeck.ui.progress import ProgressPrinter

    await host.start(session_id)
    outcome = asyncio.ensure_future(host.wait(session_id))
    printer = ProgressPrinter()
    await host.follow(session_id, (lambda _ev: None) if quiet else printer, outcome)
    return outcome.result() or {}


def exit_code_for(status: str) -> int:
    """0 for a completed session, 3 for one that ended otherwise."""
    return 0 if status == "completed" else 3


@app.command(cls=HumanCommand)
def run(
    task_text: Annotated[
        str | None, typer.Argument(metavar="[TASK]", help="Short form: what the agent should do.")
    ] = None,
    provider: ProviderOpt = None,
    mode: ModeOpt = None,
    workdir: WorkdirOpt = None,
    task: TaskOpt = None,
    task_file: TaskFileOpt = None,
    worktree: WorktreeOpt = False,
    timeout: TimeoutOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    session: SessionOpt = None,
    dry_run: DryRunOpt = False,
    max_steps: MaxStepsOpt = None,
    quiet: QuietOpt = False,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Short form: provider:model.")
    ] = None,
    max_turns: Annotated[
        int | None, typer.Option(help="Short form: stop after this many model turns.")
    ] = None,
    local: LocalOpt = False,
    detach: DetachOpt = False,
) -> None:
    """Run one task with progress on stderr; ends with the verdict (or, short form, the answer).

    When a worker (`swarmdeck worker`) serves the store the run is handed to it and followed
    from here; else, or with --local, it runs in this process. --detach hands it over and
    prints its session id at once."""
    if task_text is not None and task is None and task_file is None:
        if provider or session or worktree or dry_run or timeout or idle_timeout:
            raise UsageError(
                "the short form takes TASK and --model only",
                "for the contract form pass --task or --task-file with --provider and --mode",
            )
        if local and detach:
            raise UsageError(
                "--detach hands the run to the fleet; --local runs it here", "pick one"
            )
        _run_short(
            task_text,
            model or "openai",
            workdir or Path("."),
            mode or "agent",
            max_turns or LEGACY_MAX_TURNS,
            quiet,
            "here" if local else "detach" if detach else "fleet",
        )
        return
    if task_text is not None:
        raise UsageError("pass the task once: as TASK, --task or --task-file", "")
    from swarmdeck.cli.dispatch import contract_main
    from swarmdeck.dispatch.verdict import EXIT_TIMEOUT

    contract_main(
        {
            "provider": provider or model,
            "mode": mode,
            "workdir": workdir,
            "task": task,
            "task_file": task_file,
            "worktree": worktree,
            "timeout_s": timeout,
            "idle_timeout_s": idle_timeout,
            "session": session,
            "dry_run": dry_run,
            "max_steps": max_steps or max_turns,
            "progress": not quiet,
            "timeout_exit_code": EXIT_TIMEOUT,
            "local": local,
            "detach": detach,
        },
        started_line=False,
        json_errors=False,
    )


def _run_short(
    task: str, model: str, workdir: Path, mode: str, max_turns: int, quiet: bool, where: str
) -> None:
    """A plain agent session: the final answer on stdout. `where`: "fleet" (when a worker
    serves the store, else here), "here", or "detach" (hand it over, print its id)."""
    from swarmdeck.models.reach import check_reachable
    from swarmdeck.runtime.host import Host, SessionRequest

    host = Host()
    request = SessionRequest(task, model, workdir, mode=mode, options={"max_turns": max_turns})
    host.check_request(request)
    config, _ = host.services.provider_for(model)
    fleet = where == "detach" or (where == "fleet" and bool(host.fleet_workers()))
    if where != "detach":
        asyncio.run(check_reachable(config.base_url, config.key))
    record = host.create_session(request, fleet=fleet)
    if where == "detach":
        if not host.fleet_workers():
            print(
                "swarmdeck: no worker serves the store now; the session waits for one "
                "(`swarmdeck worker`)",
                file=sys.stderr,
            )
        print(record.id)
        return

    async def go() -> dict[str, Any]:
        try:
            if fleet:
                return await follow_to_end(host, record.id, quiet)
            return await run_and_follow(host, record.id, quiet)
        finally:
            await host.services.close_models()
            host.shutdown()

    outcome = asyncio.run(go())
    final = host.catalog.get_session(record.id)
    print(final.final_text or "", file=sys.stdout)
    print(f"session {final.id}: {final.status}", file=sys.stderr)
    sys.exit(exit_code_for(outcome.get("status", final.status)))


async def follow_to_end(host: Any, session_id: str, quiet: bool = False) -> dict[str, Any]:
    """Follow a session another process runs, from the catalog, until it ends."""
    from swarmdeck.ui.progress import ProgressPrinter

    printer = ProgressPrinter()
    ended: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    def on_event(ev: Any) -> None:
        if not quiet:
            printer(ev)
        if ev.kind == "status" and ev.payload.get("reason") and not ended.done():
            ended.set_result({"status": ev.payload["status"], "reason": ev.payload["reason"]})

    await host.follow(session_id, on_event, ended)
    return ended.result()
