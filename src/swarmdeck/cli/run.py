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

from swarmdeck.cli.agents import PluginOpt
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
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="Short form: a named agent (see `swarmdeck agents ls`)."),
    ] = None,
    plugin: PluginOpt = None,
) -> None:
    """Run one task with progress on stderr; ends with the verdict (or, short form, the answer)."""
    short = task_text is not None or agent is not None
    if short and task is None and task_file is None:
        if provider or session or worktree or dry_run or timeout or idle_timeout:
            raise UsageError(
                "the short form takes TASK, --model and --agent only",
                "for the contract form pass --task or --task-file with --provider and --mode",
            )
        workdir = workdir or Path(".")
        request = _short_request(task_text, model, agent, plugin, workdir, mode or "agent")
        request.options.setdefault("max_turns", max_turns or LEGACY_MAX_TURNS)
        _run_short(request, quiet)
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


def _short_request(
    task: str | None,
    model: str | None,
    agent: str | None,
    plugins: list[Path] | None,
    workdir: Path,
    mode: str,
) -> Any:
    """The session a short-form run starts: a plain agent, or a named one."""
    from swarmdeck.runtime.host import SessionRequest

    if agent is None:
        assert task is not None
        return SessionRequest(task, model or "openai", workdir, mode=mode)
    from swarmdeck.cli.agents import plugin_set
    from swarmdeck.errors import NotFoundError
    from swarmdeck.runtime.agents import named_request

    found = plugin_set(workdir, plugins)
    definition = found.agent(agent)
    if definition is None:
        raise NotFoundError(f"no agent named {agent}", "list them with `swarmdeck agents ls`")
    folders = [str(p.resolve()) for p in plugins or []]
    chosen = model or definition.model or "openai"
    request = named_request(
        definition, found, task=task, model=chosen, workdir=workdir, plugins=folders
    )
    if definition.cron is not None:
        raise UsageError(
            f"agent {agent} runs on a cron and never ends, and `run` waits for the end",
            "start it from the SDK, or make it a system agent",
        )
    request.mode = mode
    return request


def _run_short(request: Any, quiet: bool) -> None:
    """A plain (or named) agent session: the final answer on stdout."""
    from swarmdeck.models.reach import check_reachable
    from swarmdeck.runtime.host import Host

    host = Host()
    host.check_request(request)
    config, _ = host.services.provider_for(request.model)
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
