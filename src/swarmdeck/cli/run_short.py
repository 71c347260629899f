"""`swarmdeck run "TASK"`, the short form: a plain (or named) agent session run to its end,
its answer on stdout."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmdeck.cli.following import (
    EXIT_INTERRUPTED,
    Followed,
    exit_code_for,
    follow_or_stop,
    follow_to_end,
    run_and_follow,
)
from swarmdeck.errors import UsageError

SHORT_FORM_MAX_TURNS = 50


@dataclass(frozen=True)
class ShortLimits:
    """The limits a short-form run was given on the command line."""

    max_turns: int | None
    max_tokens: int | None
    max_cost: float | None
    max_children: int | None


def short_form_mode(mode: str | None, no_sandbox: bool) -> str:
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


def short_request(
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


def run_short(
    request: Any,
    read_only_default: bool,
    limits: ShortLimits,
    timeout: float | None,
    quiet: bool,
    no_sandbox: bool,
    placement: str,
) -> None:
    """A plain agent session: the final answer on stdout; exit 124 past the timeout, 130 on
    Ctrl-C. `placement`: "fleet" (handed to a worker when one serves the store, else here),
    "here", or "detach" (hand it over, print its id). A worker honours all of the run's
    options: they travel in the session's options (limits, --no-sandbox, the named agent's
    plugin folders, which it reads where the workdir is)."""
    from swarmdeck.dispatch.settings import load_dispatch_settings
    from swarmdeck.models.reach import check_reachable
    from swarmdeck.runtime.host import Host

    host = Host()
    config, max_turns = _apply_limits(host, request, limits, no_sandbox)
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
    _say_how_it_runs(host, request, read_only_default, workers if fleet else None, no_sandbox)
    followed = asyncio.run(_follow_here_or_there(host, record.id, fleet, quiet, wall))
    _finish(host, record.id, followed, max_turns, wall)


def _apply_limits(
    host: Any, request: Any, limits: ShortLimits, no_sandbox: bool
) -> tuple[Any, int]:
    """Put the run's limits in the session's options; returns the provider and turn cap."""
    from swarmdeck.dispatch.plan import budget_of, limit_options

    config, model_name = host.services.provider_for(request.model)
    budget = budget_of(config, model_name, limits.max_tokens, limits.max_cost)
    max_turns = limits.max_turns or request.options.get("max_turns") or SHORT_FORM_MAX_TURNS
    request.options.update(
        max_turns=max_turns, no_sandbox=no_sandbox, **limit_options(budget, limits.max_children)
    )
    return config, max_turns


def _say_how_it_runs(
    host: Any, request: Any, read_only_default: bool, workers: Any, no_sandbox: bool
) -> None:
    """Said once the run is sure to start (a refused run prints its one error line only):
    a read-only default, and a sandbox that is not there. `workers`: None when it runs
    here, else the fleet's (a worker's tools run in the sandbox it recorded)."""
    from swarmdeck.dispatch.drivers import fleet_sandbox
    from swarmdeck.tools.base import READ_ONLY_MODES
    from swarmdeck.tools.sandbox import sandbox_in_force, sandbox_warning

    if read_only_default:
        print(
            "swarmdeck: read-only run with explore's tools (pass --mode code to let the "
            "agent change files)",
            file=sys.stderr,
        )
    sandbox = (
        fleet_sandbox(workers, no_sandbox)
        if workers is not None
        else sandbox_in_force(no_sandbox or host.settings.no_sandbox)
    )
    if sandbox is not None and not sandbox.available:
        warning = sandbox_warning(
            request.mode in READ_ONLY_MODES, sandbox.reason, sandbox.opted_out
        )
        print(f"swarmdeck: {warning}", file=sys.stderr)


async def _follow_here_or_there(
    host: Any, session_id: str, fleet: bool, quiet: bool, wall: float
) -> Followed:
    """Run the session here (or follow a worker running it) until it ends, the wall clock
    runs out or a signal comes."""
    try:
        following = (
            follow_to_end(host, session_id, quiet)
            if fleet
            else run_and_follow(host, session_id, quiet)
        )
        return await follow_or_stop(host, session_id, following, wall)
    finally:
        await host.aclose()


def _finish(host: Any, session_id: str, followed: Followed, max_turns: int, wall: float) -> None:
    """The answer on stdout, how the session ended on stderr, and the exit code."""
    from swarmdeck.dispatch.verdict import EXIT_TIMEOUT

    final = host.catalog.get_session(session_id)
    print(final.final_text or "", file=sys.stdout)
    if followed.stopped == "timeout":
        print(f"session {final.id}: {final.status} (timed out after {wall:g}s)", file=sys.stderr)
        sys.exit(EXIT_TIMEOUT)
    if followed.stopped == "interrupted":
        print(
            f"session {final.id}: interrupted by {followed.by}, stopped where it was "
            f"(`swarmdeck sessions resume {final.id}` continues it)",
            file=sys.stderr,
        )
        sys.exit(EXIT_INTERRUPTED)
    outcome = followed.outcome or {}
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
