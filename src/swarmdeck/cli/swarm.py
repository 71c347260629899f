"""`swarmdeck swarm`: a coordinator splits a task among role-based members and merges their
results. stderr: a live table of the members; stdout: the merged result (or, `--json`,
one `swarmdeck.swarm` object). Exit 0 when every member completed, 3 otherwise, 2 on bad
input."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.live import Live

from swarmdeck.cli.agents import PluginOpt
from swarmdeck.cli.app import app
from swarmdeck.cli.dispatch import NoSandboxOpt, PlannerCommand, QuietOpt, TaskFileOpt, fail
from swarmdeck.errors import SwarmdeckError, UsageError

if TYPE_CHECKING:
    from swarmdeck.catalog.records import SessionRecord
    from swarmdeck.runtime.host import Host
    from swarmdeck.swarm.launch import SwarmRequest

REFRESH_SECONDS = 0.25
CANCEL_WAIT_SECONDS = 10.0


class SwarmCommand(PlannerCommand):
    """A bad invocation is one line on stderr, and with --json the error line on stdout."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Parse as usual; answer a bad invocation with `--json` in the contract's form."""
        self.json_errors = "--json" in args
        return super().parse_args(ctx, args)


@app.command(cls=SwarmCommand)
def swarm(
    task: Annotated[
        str | None, typer.Argument(help="What the swarm should do (or --task-file).")
    ] = None,
    task_file: TaskFileOpt = None,
    workdir: Annotated[
        Path, typer.Option("--workdir", "-C", help="The project the members work in.")
    ] = Path("."),
    team: Annotated[
        str | None,
        typer.Option("--team", help="A team: its name (`swarmdeck team ls`) or its file."),
    ] = None,
    plan: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="A plan file (YAML or JSON: [{role, task, mode, model?, agent?, "
            "depends_on?}]); skips the decomposition.",
        ),
    ] = None,
    max_members: Annotated[
        int | None,
        typer.Option("--max-members", min=1, help="At most this many members (default 5)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="The coordinator's provider:model (members' default)."),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", min=1, help="The whole swarm's limit in seconds (team's max_timeout)."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="stdout: one swarmdeck.swarm JSON object.")
    ] = False,
    quiet: QuietOpt = False,
    no_sandbox: NoSandboxOpt = False,
    plugin: PluginOpt = None,
) -> None:
    """Split a task among a team's members, run them in parallel, merge their results."""
    from swarmdeck.swarm.launch import SwarmRequest
    from swarmdeck.swarm.report import started_object

    try:
        host, record = _create(
            task,
            task_file,
            SwarmRequest(
                task="",
                workdir=workdir,
                team=team,
                plan_file=plan,
                max_members=max_members,
                model=model,
                timeout_s=timeout,
                no_sandbox=no_sandbox,
                plugins=tuple(str(p) for p in plugin or ()),
            ),
        )
    except SwarmdeckError as exc:
        fail(exc.message, exc.hint, json_line=as_json)
    if as_json:
        # stdout holds one object, the swarm's; its session id goes out now on stderr, for
        # a caller (the MCP server) that answers before the swarm ends.
        sys.stderr.write(json.dumps(started_object(record), ensure_ascii=False) + "\n")
        sys.stderr.flush()
    report = asyncio.run(_run(host, record.id, quiet))
    _print_outcome(report, as_json)
    from swarmdeck.cli.dispatch import exit_now, running_as_cli
    from swarmdeck.swarm.report import exit_code

    if running_as_cli():
        exit_now(exit_code(report))  # the result is out and the engine down: no teardown
    raise typer.Exit(exit_code(report))


def _create(
    task: str | None, task_file: Path | None, asked: SwarmRequest
) -> tuple[Host, SessionRecord]:
    """Read the task, prepare the swarm and create its coordinator session on a local host."""
    from dataclasses import replace

    from swarmdeck.cli.hosting import session_host
    from swarmdeck.dispatch.guards import read_task
    from swarmdeck.swarm.launch import prepare_swarm

    if (task is None) == (task_file is None):
        raise UsageError(
            "pass the task or --task-file, exactly one",
            'say what the swarm should do: swarm "TASK" (or --task-file FILE)',
        )
    # A file keeps the task off argv, where `ps` would show it (the MCP server's way).
    text = read_task(task, task_file)
    # The coordinator runs here, on the local path (its live table follows it in this
    # process, and its members start as its child workflows here). Should this process
    # die, a worker that takes its lease over runs it on: session_host registers the
    # swarm's driver there too (cli/worker.py, `sessions resume`).
    host = session_host()
    request = prepare_swarm(replace(asked, task=text), host.services)
    return host, host.create_session(request)


async def _run(host: Host, session_id: str, quiet: bool) -> dict[str, Any]:
    """Run the swarm here to its end (or to a signal, which cancels it), showing progress."""
    from swarmdeck.swarm.report import build_report

    console = Console(stderr=True, highlight=False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await host.start(session_id)
        outcome = asyncio.ensure_future(host.wait(session_id))
        stopped = asyncio.ensure_future(stop.wait())
        shown: dict[str, Any] | None = None
        live = Live(console=console, refresh_per_second=4, transient=False)
        use_live = console.is_terminal and not quiet
        with live if use_live else contextlib.nullcontext():
            while not outcome.done():
                report = await asyncio.to_thread(build_report, host.catalog, session_id, True)
                _show(console, live if use_live else None, shown, report, quiet)
                shown = report
                await asyncio.wait({outcome, stopped}, timeout=REFRESH_SECONDS)
                if stop.is_set():
                    console.print("interrupted: cancelling the swarm")
                    # Cancelled steps make the engine log warnings; this line says it all.
                    logging.getLogger("dbos").setLevel(logging.ERROR)
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(
                            host.cancel(session_id, "interrupted"), CANCEL_WAIT_SECONDS
                        )
                    break
            final = await asyncio.to_thread(build_report, host.catalog, session_id, True)
            _show(console, live if use_live else None, shown, final, quiet)
        stopped.cancel()
        if not quiet:
            _print_footer(console, final)
        return await asyncio.to_thread(build_report, host.catalog, session_id)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await host.aclose()


def _show(
    console: Console,
    live: Live | None,
    before: dict[str, Any] | None,
    report: dict[str, Any],
    quiet: bool,
) -> None:
    from swarmdeck.ui.swarm_table import changes, members_table

    if quiet:
        return
    if live is not None:
        live.update(members_table(report))
        return
    for line in changes(before, report):
        console.print(f"swarm: {line}", markup=False)


def _print_footer(console: Console, report: dict[str, Any]) -> None:
    from swarmdeck.ui.swarm_table import members_table, summary_line

    if not console.is_terminal:
        console.print(members_table(report))
    for d in report["plan"]["dropped"]:
        console.print(f"dropped {d['role']}: {d['reason']}", markup=False)
    error = report.get("error")
    if error:
        console.print(f"[red]error[/] {error}")
    for m in report["members"]:
        tree = m.get("worktree")
        if tree:
            console.print(f"{m['role']} worked in {tree['path']}; to merge it:", markup=False)
            console.print(f"  {tree['merge']}", markup=False, soft_wrap=True)
    console.print(summary_line(report), markup=False)
    console.print(f"the tree: swarmdeck sessions tree {report['session_id']}", markup=False)


def _print_outcome(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(report, ensure_ascii=False) + "\n")
    elif report["result"]:
        sys.stdout.write(report["result"]["summary"].rstrip("\n") + "\n")
    sys.stdout.flush()
