"""`swarmdeck run`: one run with progress on stderr.

Two forms. The contract form (`--provider P --mode M --workdir D --task T`) is `dispatch`
for humans: progress on stderr, the verdict as the one line on stdout, exit 124 on a
timeout. The short form (`swarmdeck run "TASK" --model provider:model`) runs a plain agent
session and prints its final answer on stdout.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

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
    SessionOpt,
    TaskFileOpt,
    TaskOpt,
    TimeoutOpt,
    WorkdirOpt,
    WorktreeOpt,
    turn_cap,
)
from swarmdeck.errors import UsageError

SHORT_FORM_MAX_TURNS = 50


async def run_and_follow(
    host: Any, session_id: str, quiet: bool = False, start: bool = True
) -> dict[str, Any]:
    """Run a session to its end in this process (started here unless `start` is False),
    printing progress unless quiet."""
    if start:
        await host.start(session_id)
    outcome = asyncio.ensure_future(host.wait(session_id))
    return await _follow(host, session_id, outcome, quiet) or {}


async def _follow(
    host: Any,
    session_id: str,
    done: asyncio.Future[Any],
    quiet: bool,
    also: Any = None,
) -> Any:
    """Print the session's progress until `done`; a question it asks is answered from here
    (even a quiet run says how: it would wait for ever otherwise). Returns `done`'s result."""
    from swarmdeck.cli.ask_prompt import AskUserPrompt
    from swarmdeck.views.progress import ProgressPrinter

    printer = ProgressPrinter()
    asker = AskUserPrompt(host, session_id, printer.console)

    def on_event(ev: Any) -> None:
        if not quiet:
            printer(ev)
        asker(ev)
        if also is not None:
            also(ev)

    try:
        await host.follow(session_id, on_event, done)
    finally:
        asker.close()
    return done.result()


def exit_code_for(status: str, reason: str | None = None) -> int:
    """0 for a completed session, 3 for one that ended otherwise or ran out of turns."""
    return 0 if status == "completed" and reason != "step_cap" else 3


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
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Short form: provider:model.")
    ] = None,
    max_steps: MaxStepsOpt = None,
    no_sandbox: NoSandboxOpt = False,
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="Short form: a named agent (see `swarmdeck agents ls`)."),
    ] = None,
    plugin: PluginOpt = None,
    local: LocalOpt = False,
    detach: DetachOpt = False,
) -> None:
    """Run one task with progress on stderr; ends with the verdict (or, short form, the answer).

    When a worker (`swarmdeck worker`) serves the store the run is handed to it and followed
    from here; else, or with --local, it runs in this process. --detach hands it over and
    prints its session id at once."""
    limits = ShortLimits(turn_cap(max_turns, max_steps), max_tokens, max_cost, max_children)
    short = task_text is not None or agent is not None
    if short and task is None and task_file is None:
        if provider or session or worktree or dry_run or idle_timeout:
            raise UsageError(
                "the short form takes TASK, --model, --agent, --workdir, --timeout and the "
                "limits only",
                "for the contract form pass --task or --task-file with --provider and --mode",
            )
        if local and detach:
            raise UsageError(
                "--detach hands the run to the fleet; --local runs it here", "pick one"
            )
        if task_text is not None and not task_text.strip():
            raise UsageError("the task is empty", 'say what the agent should do: run "TASK"')
        where = workdir or Path(".")
        session_mode = _short_form_mode(mode, no_sandbox)
        request = _short_request(task_text, model, agent, plugin, where, session_mode)
        placement = "here" if local else "detach" if detach else "fleet"
        _run_short(request, mode is None, limits, timeout, quiet, no_sandbox, placement)
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
        },
        started_line=False,
        json_errors=False,
    )


@dataclass(frozen=True)
class ShortLimits:
    """The limits a short-form run was given on the command line."""

    max_turns: int | None
    max_tokens: int | None
    max_cost: float | None
    max_children: int | None


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
        # A file of that name that did not load says why, rather than "no agent".
        for problem in found.problems:
            if problem.level == "error" and problem.path.name == f"{agent}.agent.md":
                raise UsageError(problem.line(), "fix it (`swarmdeck agents validate` checks)")
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


def _run_short(
    request: Any,
    read_only_default: bool,
    limits: ShortLimits,
    timeout: float | None,
    quiet: bool,
    no_sandbox: bool,
    placement: str,
) -> None:
    """A plain agent session: the final answer on stdout; exit 124 past the timeout.
    `placement`: "fleet" (handed to a worker when one serves the store, else here), "here",
    or "detach" (hand it over, print its id). A worker honours all of the run's options:
    they travel in the session's options (limits, --no-sandbox, the named agent's plugin
    folders, which it reads where the workdir is)."""
    from swarmdeck.dispatch.drivers import fleet_sandbox, stop_session
    from swarmdeck.dispatch.plan import budget_of, limit_options
    from swarmdeck.dispatch.settings import load_dispatch_settings
    from swarmdeck.dispatch.verdict import EXIT_TIMEOUT
    from swarmdeck.models.reach import check_reachable
    from swarmdeck.runtime.host import Host
    from swarmdeck.tools.base import READ_ONLY_MODES
    from swarmdeck.tools.sandbox import sandbox_in_force, sandbox_warning

    host = Host()
    config, model_name = host.services.provider_for(request.model)
    budget = budget_of(config, model_name, limits.max_tokens, limits.max_cost)
    max_turns = limits.max_turns or request.options.get("max_turns") or SHORT_FORM_MAX_TURNS
    request.options.update(
        max_turns=max_turns, no_sandbox=no_sandbox, **limit_options(budget, limits.max_children)
    )
    host.check_request(request)
    wall = load_dispatch_settings(host.settings.home).timeout_s if timeout is None else timeout
    workers = host.fleet_workers() if placement != "here" else []
    fleet = placement == "detach" or bool(workers)
    # A scripted model is served by the process that calls it: there is nothing to probe yet.
    if placement != "detach" and config.script is None:
        asyncio.run(check_reachable(config.base_url, config.key))
    record = host.create_session(request, fleet=fleet)
    if placement == "detach":
        if not workers:
            print(
                "swarmdeck: no worker serves the store now; the session waits for one "
                "(`swarmdeck worker`)",
                file=sys.stderr,
            )
        print(record.id)
        return
    # Said once the run is sure to start (a refused run prints its one error line only).
    if read_only_default:
        print(
            "swarmdeck: read-only run with explore's tools (pass --mode code to let the "
            "agent change files)",
            file=sys.stderr,
        )
    # A worker's tools run in the sandbox it recorded; this process's in its own.
    sandbox = (
        fleet_sandbox(workers, no_sandbox)
        if fleet
        else sandbox_in_force(no_sandbox or host.settings.no_sandbox)
    )
    if sandbox is not None and not sandbox.available:
        warning = sandbox_warning(
            request.mode in READ_ONLY_MODES, sandbox.reason, sandbox.opted_out
        )
        print(f"swarmdeck: {warning}", file=sys.stderr)

    async def go() -> dict[str, Any] | None:
        try:
            following = (
                follow_to_end(host, record.id, quiet)
                if fleet
                else run_and_follow(host, record.id, quiet)
            )
            return await (asyncio.wait_for(following, wall) if wall > 0 else following)
        except TimeoutError:
            await stop_session(host, record.id, f"timeout: stopped by swarmdeck after {wall:g}s")
            return None
        finally:
            await host.aclose()

    outcome = asyncio.run(go())
    final = host.catalog.get_session(record.id)
    print(final.final_text or "", file=sys.stdout)
    if outcome is None:
        print(f"session {final.id}: {final.status} (timed out after {wall:g}s)", file=sys.stderr)
        sys.exit(EXIT_TIMEOUT)
    reason = outcome.get("reason")
    print(f"session {final.id}: {final.status}{_stopped(reason, max_turns)}", file=sys.stderr)
    sys.exit(exit_code_for(outcome.get("status", final.status), reason))


def _stopped(reason: str | None, max_turns: int) -> str:
    """What the end of a short-form run adds when a limit stopped it."""
    if reason == "step_cap":
        return f" (stopped at the step cap: {max_turns} turns)"
    if reason == "budget":
        return " (budget_exhausted: the answer above is what it had, partial)"
    return ""


async def follow_to_end(host: Any, session_id: str, quiet: bool = False) -> dict[str, Any]:
    """Follow a session another process runs, from the catalog, until it ends."""
    ended: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    def on_end(ev: Any) -> None:
        if ev.kind == "status" and ev.payload.get("reason") and not ended.done():
            ended.set_result({"status": ev.payload["status"], "reason": ev.payload["reason"]})

    return await _follow(host, session_id, ended, quiet, on_end)
