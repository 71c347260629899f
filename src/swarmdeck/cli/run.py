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
    NoSandboxOpt,
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
    no_sandbox: NoSandboxOpt = False,
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
            mode,
            max_turns or LEGACY_MAX_TURNS,
            quiet,
            no_sandbox,
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
            "no_sandbox": no_sandbox,
            "timeout_exit_code": EXIT_TIMEOUT,
        },
        started_line=False,
        json_errors=False,
    )


def _short_form_mode(mode: str | None, no_sandbox: bool) -> str:
    """The session mode of a short-form run; without --mode it only reads (explore's
    tools: reading, the shell where a sandbox confines it, sub-agents, timers)."""
    from swarmdeck.tools.base import READ_ONLY_MODES

    chosen = mode or "explore"
    if no_sandbox and chosen in READ_ONLY_MODES:
        raise UsageError(
            f"--no-sandbox does not apply to {chosen} mode",
            "read-only runs use the shell only inside a sandbox; pass --mode code",
        )
    return chosen


def _run_short(
    task: str,
    model: str,
    workdir: Path,
    mode: str | None,
    max_turns: int,
    quiet: bool,
    no_sandbox: bool,
) -> None:
    """A plain agent session: the final answer on stdout."""
    from swarmdeck.models.reach import check_reachable
    from swarmdeck.runtime.host import Host, SessionRequest
    from swarmdeck.tools.base import READ_ONLY_MODES
    from swarmdeck.tools.sandbox import sandbox_in_force, sandbox_warning

    session_mode = _short_form_mode(mode, no_sandbox)
    host = Host()
    request = SessionRequest(
        task,
        model,
        workdir,
        mode=session_mode,
        options={"max_turns": max_turns, "no_sandbox": no_sandbox},
    )
    host.check_request(request)
    config, _ = host.services.provider_for(model)
    asyncio.run(check_reachable(config.base_url, config.key))
    # Said once the run is sure to start (a refused run prints its one error line only).
    if mode is None:
        print(
            "swarmdeck: read-only run with explore's tools (pass --mode code to let the "
            "agent change files)",
            file=sys.stderr,
        )
    opted_out = no_sandbox or host.settings.no_sandbox
    sandbox = sandbox_in_force(opted_out)
    if not sandbox.available:
        warning = sandbox_warning(session_mode in READ_ONLY_MODES, sandbox.reason, opted_out)
        print(f"swarmdeck: {warning}", file=sys.stderr)
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
