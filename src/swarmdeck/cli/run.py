"""`swarmdeck run`: one run with progress on stderr.

Two forms. The contract form (`--provider P --mode M --workdir D --task T`) is `dispatch`
for humans: progress on stderr, the verdict as the one line on stdout, exit 124 on a
timeout. The short form (`swarmdeck run "TASK" --model provider:model`) runs a plain agent
session and prints its final answer on stdout.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from swarmdeck.cli.agents import PluginOpt
from swarmdeck.cli.app import app
from swarmdeck.cli.dispatch import (
    DetachOpt,
    DryRunOpt,
    HumanCommand,
    IdleTimeoutOpt,
    LocalOpt,
    MaxChildrenOpt,
    MaxCostOpt,
    MaxStepsOpt,
    MaxTokensOpt,
    MaxTurnsOpt,
    ModeOpt,
    NoSandboxOpt,
    ProviderOpt,
    QuietOpt,
    RunnerOpt,
    SessionOpt,
    TaskFileOpt,
    TaskOpt,
    TimeoutOpt,
    WorkdirOpt,
    WorkspaceOpt,
    WorktreeOpt,
    turn_cap,
)
from swarmdeck.errors import UsageError

if TYPE_CHECKING:
    from swarmdeck.cli.run_short import ShortLimits


ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="Short form: provider:model.")]
AgentOpt = Annotated[
    str | None,
    typer.Option("--agent", help="Short form: a named agent (see `swarmdeck agents ls`)."),
]


# The contract form takes the options `dispatch` takes, listed alike on purpose: typer reads
# each command's options from its own signature.
@app.command(cls=HumanCommand)
def run(
    task_text: Annotated[
        str | None, typer.Argument(metavar="TASK", help="Short form: what the agent should do.")
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
    max_turns: MaxTurnsOpt = None,
    max_tokens: MaxTokensOpt = None,
    max_cost: MaxCostOpt = None,
    max_children: MaxChildrenOpt = None,
    quiet: QuietOpt = False,
    model: ModelOpt = None,
    max_steps: MaxStepsOpt = None,
    no_sandbox: NoSandboxOpt = False,
    agent: AgentOpt = None,
    plugin: PluginOpt = None,
    local: LocalOpt = False,
    detach: DetachOpt = False,
    workspace: WorkspaceOpt = None,
    runner: RunnerOpt = None,
) -> None:
    """Run one task with progress on stderr; ends with the verdict (or, short form, the answer).

    When a worker (`swarmdeck worker`) serves the store the run is handed to it and followed
    from here; else, or with --local, it runs in this process. --detach hands it over and
    prints its session id at once."""
    from swarmdeck.cli.run_short import ShortLimits

    limits = ShortLimits(turn_cap(max_turns, max_steps), max_tokens, max_cost, max_children)
    if (task_text is not None or agent is not None) and task is None and task_file is None:
        contract_only = bool(provider or session or worktree or dry_run or idle_timeout or runner)
        _short_form(
            task_text, model, agent, plugin, workdir, mode, limits, timeout, quiet,
            no_sandbox, (local, detach, contract_only), workspace,
        )  # fmt: skip
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
            "max_turns": limits.max_turns,
            "max_tokens": max_tokens,
            "max_cost": max_cost,
            "max_children": max_children,
            "progress": not quiet,
            "no_sandbox": no_sandbox,
            "timeout_exit_code": EXIT_TIMEOUT,
            "local": local,
            "detach": detach,
            "workspace": workspace,
            "runner": runner,
        },
        started_line=False,
        json_errors=False,
    )


def _short_form(
    task_text: str | None,
    model: str | None,
    agent: str | None,
    plugin: list[Path] | None,
    workdir: Path | None,
    mode: str | None,
    limits: ShortLimits,
    timeout: float | None,
    quiet: bool,
    no_sandbox: bool,
    flags: tuple[bool, bool, bool],
    workspace: str | None = None,
) -> None:
    """Check the short form's options, then run it (see run_short)."""
    from swarmdeck.cli.run_short import run_short, short_form_mode, short_request

    local, detach, contract_only = flags
    if contract_only:
        raise UsageError(
            "the short form takes TASK, --model, --agent, --workdir, --timeout and the limits only",
            "for the contract form pass --task or --task-file with --provider and --mode",
        )
    if local and detach:
        raise UsageError("--detach hands the run to the fleet; --local runs it here", "pick one")
    if task_text is not None and not task_text.strip():
        raise UsageError("the task is empty", 'say what the agent should do: run "TASK"')
    where = workdir or Path(".")
    session_mode = short_form_mode(mode, no_sandbox)
    request = short_request(task_text, model, agent, plugin, where, session_mode)
    if workspace is not None:
        request.options["workspace"] = workspace
    placement = "here" if local else "detach" if detach else "fleet"
    run_short(request, mode is None, limits, timeout, quiet, no_sandbox, placement)
