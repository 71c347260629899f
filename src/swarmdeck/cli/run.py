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
    DryRunOpt,
    HumanCommand,
    IdleTimeoutOpt,
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
from swarmdeck.dispatch.verdict import EXIT_TIMEOUT
from swarmdeck.errors import UsageError

LEGACY_MAX_TURNS = 50


async def run_and_follow(
    host: Any, session_id: str, quiet: bool = False, start: bool = True
) -> dict[str, Any]:
    """Run a session to its end in this process (started here unless `start` is False),
    printing progress unless quiet."""
    from swarmdeck.cli.ask_prompt import AskUserPrompt
    from swarmdeck.ui.progress import ProgressPrinter

    if start:
        await host.start(session_id)
    outcome = asyncio.ensure_future(host.wait(session_id))
    printer = ProgressPrinter()
    # Even a quiet run says how to answer a question: it would wait for ever otherwise.
    asker = AskUserPrompt(host, session_id, printer.console)

    def on_event(ev: Any) -> None:
        if not quiet:
            printer(ev)
        asker(ev)

    try:
        await host.follow(session_id, on_event, outcome)
    finally:
        asker.close()
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
) -> None:
    """Run one task with progress on stderr; ends with the verdict (or, short form, the answer)."""
    if task_text is not None and task is None and task_file is None:
        if provider or session or worktree or dry_run or timeout or idle_timeout:
            raise UsageError(
                "the short form takes TASK and --model only",
                "for the contract form pass --task or --task-file with --provider and --mode",
            )
        _run_short(
            task_text,
            model or "openai",
            workdir or Path("."),
            mode or "agent",
            max_turns or LEGACY_MAX_TURNS,
            quiet,
        )
        return
    if task_text is not None:
        raise UsageError("pass the task once: as TASK, --task or --task-file", "")
    from swarmdeck.cli.dispatch import contract_main

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
        },
        started_line=False,
        json_errors=False,
    )


def _run_short(
    task: str, model: str, workdir: Path, mode: str, max_turns: int, quiet: bool
) -> None:
    """A plain agent session: the final answer on stdout."""
    from swarmdeck.models.reach import check_reachable
    from swarmdeck.runtime.host import Host, SessionRequest

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
    sys.exit(exit_code_for(outcome.get("status", final.status)))
