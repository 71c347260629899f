"""`swarmdeck dispatch`, `fanout` and `template`: the planner contract on the command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from typer import _click as tclick
from typer._click.exceptions import UsageError as ClickUsageError

from swarmdeck.cli.app import app, known_error
from swarmdeck.cli.help_format import HelpCommand
from swarmdeck.dispatch.stdout import ContractStdout
from swarmdeck.errors import SwarmdeckError, UsageError

if TYPE_CHECKING:
    # The verdict's models (~15 ms with their schemas) come after the hand-over.
    from swarmdeck.dispatch.verdict import Started

ProviderOpt = Annotated[
    str | None, typer.Option("--provider", "-p", help="Provider key, or provider:model.")
]
ModeOpt = Annotated[
    str | None, typer.Option("--mode", help="code, explore, test, review or resume.")
]
WorkdirOpt = Annotated[
    Path | None, typer.Option("--workdir", "-C", help="The project directory to work in.")
]
TaskOpt = Annotated[str | None, typer.Option("--task", help="The task text.")]
TaskFileOpt = Annotated[
    Path | None, typer.Option("--task-file", help="A UTF-8 file with the task.")
]
WorktreeOpt = Annotated[
    bool, typer.Option("--worktree", help="Work in a fresh detached git worktree of HEAD.")
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        min=0,
        help="Wall-clock limit in seconds (default 1800; 0: none). Each model request also "
        "fails after 120 s without a first byte (first_byte_timeout_s in the provider file).",
    ),
]
IdleTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--idle-timeout",
        help="End the run after this many seconds without an event (default 600; 0: none).",
    ),
]
SessionOpt = Annotated[
    str | None, typer.Option("--session", help="With --mode resume: the session to continue.")
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print what would run; call no model.")]
MaxTurnsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-turns",
        min=1,
        help="Model turns allowed: the verdict's step_cap (default: the mode's cap; 50 for TASK).",
    ),
]
# The old spelling: the verdict counts model turns as `steps`.
MaxStepsOpt = Annotated[int | None, typer.Option("--max-steps", min=1, hidden=True)]
MaxTokensOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tokens", min=1, help="Token budget (input + output); the run ends when spent."
    ),
]
MaxCostOpt = Annotated[
    float | None,
    typer.Option(
        "--max-cost",
        min=0,
        help="Cost budget in USD (more than 0); needs a model with known prices.",
    ),
]
MaxChildrenOpt = Annotated[
    int | None,
    typer.Option(
        "--max-children", min=0, help="Sub-agents the session may have live at once (default 50)."
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")]
LocalOpt = Annotated[
    bool,
    typer.Option(
        "--local",
        help="Run in this process even when a worker (`swarmdeck worker`) serves the store.",
    ),
]
DetachOpt = Annotated[
    bool,
    typer.Option(
        "--detach",
        help="Hand the session to the fleet's workers and return at once (prints its started line).",
    ),
]
RunnerOpt = Annotated[
    str | None,
    typer.Option(
        "--runner",
        help="What runs the task: swarmdeck (the built-in loop), opencode, claude or codex "
        "(default: the provider's `runner`, else swarmdeck).",
    ),
]
WorkspaceOpt = Annotated[
    str | None,
    typer.Option(
        "--workspace",
        help="store: capture the workdir into the store; workers run on their own copy "
        "(hosts share only the store). shared: every worker uses the workdir's path. "
        "Default: $SWARMDECK_WORKSPACE, else store when the run goes to workers on other "
        "hosts, else shared.",
        show_default=False,
    ),
]
DeliverOpt = Annotated[
    str,
    typer.Option(
        "--deliver",
        help="With --workspace store: bring the changes back as a branch swarmdeck/<run> "
        "in the workdir's repository (branch), or as the run's changes.patch (patch).",
    ),
]
NoSandboxOpt = Annotated[
    bool,
    typer.Option(
        "--no-sandbox",
        help="Code/resume: run shell tools without a sandbox (where none works they refuse).",
    ),
]


def fail(message: str, hint: str, *, json_line: bool, out: Any = None) -> NoReturn:
    """Exit 2 with one line on stderr and, for planner commands, the error line on stdout."""
    from swarmdeck.dispatch.verdict import EXIT_USAGE, error_line

    if json_line:
        (out or sys.stdout).write(error_line(message, hint) + "\n")
        (out or sys.stdout).flush()
    text = f"{message} ({hint})" if hint else message
    print(f"swarmdeck: error: {text}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


class PlannerCommand(HelpCommand):
    """A command whose bad invocations still answer with the contract's error line."""

    json_errors = True

    def parse_args(self, ctx: tclick.Context, args: list[str]) -> list[str]:
        """Parse as usual; a usage error becomes exit 2 with one line, never a traceback."""
        try:
            return super().parse_args(ctx, args)
        except ClickUsageError as exc:
            fail(
                " ".join(exc.format_message().split()),
                f"see `swarmdeck {self.name} --help`",
                json_line=self.json_errors,
            )


class HumanCommand(PlannerCommand):
    """Like PlannerCommand, without the JSON error line."""

    json_errors = False


FLAGS = {"timeout_s": "timeout", "idle_timeout_s": "idle-timeout", "progress": "quiet"}


def turn_cap(max_turns: int | None, max_steps: int | None) -> int | None:
    """--max-turns, or its old spelling --max-steps; both at once must agree."""
    if max_turns is not None and max_steps is not None and max_turns != max_steps:
        raise UsageError(
            f"--max-turns {max_turns} and --max-steps {max_steps} disagree",
            "pass --max-turns only (--max-steps is its old name)",
        )
    return max_turns if max_turns is not None else max_steps


def dispatch_options(**values: Any) -> Any:
    """DispatchOptions from command-line values; a bad value is a one-line UsageError."""
    from swarmdeck.dispatch.plan import DispatchOptions

    if not values.get("provider"):
        raise UsageError("--provider is required", "e.g. --provider glm or --provider glm:glm-5.1")
    if not values.get("mode"):
        raise UsageError("--mode is required", "one of code, explore, test, review, resume")
    values["max_turns"] = turn_cap(values.get("max_turns"), values.pop("max_steps", None))
    try:
        return DispatchOptions(**values)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        flag = FLAGS.get(field, field.replace("_", "-"))
        raise UsageError(f"--{flag}: {first['msg']}", "see `swarmdeck dispatch --help`") from None


def run_contract(out: ContractStdout, opts: Any, *, started_line: bool) -> int:
    """Prepare and run one dispatch; returns the exit code. `started_line` False: stderr."""
    from swarmdeck.dispatch.plan import prepare
    from swarmdeck.dispatch.runner import Runner

    plan = prepare(opts)
    if opts.dry_run:
        out.emit(json.dumps(plan.dry_run_doc(), ensure_ascii=False))
        return 0

    def on_started(started: Started) -> None:
        if started_line:
            out.emit(started.model_dump_json())
        else:
            print(
                f"swarmdeck: run {started.run_id} · {started.mode} on {started.model} · "
                f"sandbox {started.sandbox} · log {started.log_path}",
                file=sys.stderr,
            )

    runner = Runner(plan, on_started, lambda v: out.emit(v.line()))
    if opts.detach:
        started = runner.detach()
        if not started_line:
            out.emit(started.session_id)
        return 0
    return runner.run().exit_code


def contract_main(values: dict[str, Any], *, started_line: bool, json_errors: bool) -> None:
    """The shared body of `dispatch` and contract-form `run`: guard stdout, run, exit."""
    with ContractStdout() as out:
        try:
            code = run_contract(out, dispatch_options(**values), started_line=started_line)
        except SwarmdeckError as exc:
            if out.emitted:
                raise
            fail(exc.message, exc.hint, json_line=json_errors, out=_Emitter(out))
        except Exception as exc:
            if out.emitted or os.environ.get("SWARMDECK_DEBUG"):
                raise
            if (known := known_error(exc)) is not None:
                fail(known.message, known.hint, json_line=json_errors, out=_Emitter(out))
            # Nothing ran: still one error line, so the planner's parser gets an answer.
            fail(
                f"internal error: {type(exc).__name__}: {exc}",
                "rerun with SWARMDECK_DEBUG=1 for the traceback, and please report it",
                json_line=json_errors,
                out=_Emitter(out),
            )
    if running_as_cli():
        exit_now(code)
    sys.exit(code)


def running_as_cli() -> bool:
    """True in a `swarmdeck` process (not when the command is called inside another program)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "swarmdeck.__main__":
        return True
    return os.path.basename(sys.argv[0]) == "swarmdeck" and os.path.isfile(sys.argv[0])


def exit_now(code: int) -> NoReturn:
    """Leave without the interpreter's teardown: the verdict is out and the engine is down.

    Tearing down the imported SDKs and closing the store (a WAL checkpoint) took 1-2 s after
    the verdict; a planner waiting for the process to end should not pay for it.
    """
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class _Emitter:
    """A file-like front for ContractStdout, so `fail` can write the error line."""

    def __init__(self, out: ContractStdout) -> None:
        self.out = out

    def write(self, text: str) -> None:
        if text.strip():
            self.out.emit(text)

    def flush(self) -> None:
        pass


@app.command(cls=PlannerCommand)
def dispatch(
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
    local: LocalOpt = False,
    detach: DetachOpt = False,
    max_steps: MaxStepsOpt = None,
    no_sandbox: NoSandboxOpt = False,
    runner: RunnerOpt = None,
    workspace: WorkspaceOpt = None,
    deliver: DeliverOpt = "branch",
) -> None:
    """Run one bounded task on a worker. stdout: exactly two JSON lines, started and verdict
    (with --detach: the started line alone)."""
    contract_main(
        {
            "local": local,
            "detach": detach,
            "provider": provider,
            "mode": mode,
            "workdir": workdir,
            "task": task,
            "task_file": task_file,
            "worktree": worktree,
            "timeout_s": timeout,
            "idle_timeout_s": idle_timeout,
            "session": session,
            "dry_run": dry_run,
            "max_turns": max_turns,
            "max_steps": max_steps,
            "max_tokens": max_tokens,
            "max_cost": max_cost,
            "max_children": max_children,
            "progress": not quiet,
            "no_sandbox": no_sandbox,
            "runner": runner,
            "workspace": workspace,
            "deliver": deliver,
        },
        started_line=True,
        json_errors=True,
    )


@app.command(cls=HumanCommand)
def template(
    mode: Annotated[str, typer.Argument(help="code, explore, test, review or resume.")],
) -> None:
    """Print the task template of a mode; fill in every <FILL: ...> before dispatching."""
    from swarmdeck.dispatch.templates import task_template

    sys.stdout.write(task_template(mode))


@app.command(cls=PlannerCommand)
def fanout(
    job: Annotated[
        list[str] | None,
        typer.Option("--job", help="PROVIDER:MODE:TASK_FILE; repeat for each job."),
    ] = None,
    jobs_file: Annotated[
        Path | None,
        typer.Option(
            "--jobs-file",
            help="A YAML file: `jobs:` [{provider, mode, task_file or task, workdir, "
            "worktree, timeout, max_turns...}] and optional `defaults:`. Format: "
            "docs/fanout.md in the swarmdeck repository.",
        ),
    ] = None,
    workdir: WorkdirOpt = None,
    worktree: Annotated[
        bool, typer.Option("--worktree", help="Give every code job its own worktree.")
    ] = False,
    max_parallel: Annotated[
        int, typer.Option("--max-parallel", help="Jobs running at once.", min=1)
    ] = 4,
    timeout: TimeoutOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    no_sandbox: Annotated[
        bool,
        typer.Option(
            "--no-sandbox",
            help="Code/resume jobs: run shell tools without a sandbox (read-only jobs keep "
            "theirs; per job: `no_sandbox: true`).",
        ),
    ] = False,
) -> None:
    """Run several jobs at once. stdout: one JSON array of verdicts in job order."""
    from swarmdeck.dispatch.fanout import load_jobs, run_fanout

    with ContractStdout() as out:
        try:
            jobs = load_jobs(
                job or [],
                jobs_file,
                workdir=workdir,
                worktree=worktree,
                timeout_s=timeout,
                idle_timeout_s=idle_timeout,
                no_sandbox=no_sandbox,
            )
            # Nothing is on stdout before the array: a refusal here still gets the error line.
            verdicts = run_fanout(jobs, max_parallel=max_parallel)
        except SwarmdeckError as exc:
            fail(exc.message, exc.hint, json_line=True, out=_Emitter(out))
        out.emit(json.dumps(verdicts, ensure_ascii=False))
    sys.exit(0 if all(v.get("verdict") == "completed" for v in verdicts) else 3)
