"""The shell tool: an argv checked by the mode policy, run in the sandbox in force.

Fail closed: where no sandbox works, a read-only mode is not offered the shell at all, and
a write mode runs it only when its user opted out of the sandbox.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel, Field

from swarmdeck.config import sandbox_opted_out
from swarmdeck.errors import PermissionDeniedError
from swarmdeck.secrets.redact import default_redactor
from swarmdeck.tools.base import READ_ONLY_MODES, Effect, Tool, ToolContext
from swarmdeck.tools.paths import credential_reason
from swarmdeck.tools.policy import check_command, hardened
from swarmdeck.tools.sandbox import run_command, sandbox_in_force, shell_refusal

MAX_TIMEOUT_S = 1_800.0
OUTPUT_CAP = 50_000


class ShellArgs(BaseModel):
    """Arguments of shell."""

    argv: list[str] = Field(
        min_length=1,
        description='e.g. ["pytest", "-q"] (no shell parsing)',
    )
    timeout_s: float = Field(60, gt=0, le=MAX_TIMEOUT_S)  # seconds before it is killed


def _refuse_credential_args(argv: list[str], workdir: Path) -> None:
    """Refuse arguments that name a credential file (`cat .env`, `--key=~/.ssh/id_rsa`).

    The sandbox hides these too; this check also holds where bwrap is missing.
    """
    for arg in argv[1:]:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if not value or value.startswith("-"):
            continue
        try:
            path = Path(value).expanduser()
        except RuntimeError:  # "~someone" with no such user: not a path we can resolve
            continue
        reason = credential_reason(path if path.is_absolute() else workdir / path, root=workdir)
        if reason:
            raise PermissionDeniedError(f"argument {arg!r} names a {reason}")


def opted_out(ctx: ToolContext) -> bool:
    """True when this run's user accepted tools without a sandbox (--no-sandbox, or
    `sandbox: off` in the home's settings.yaml)."""
    settings = ctx.services.get("settings")
    home_setting = settings.no_sandbox if settings is not None else sandbox_opted_out()
    return bool(ctx.services.get("no_sandbox")) or home_setting


def offered_in(mode: str) -> bool:
    """A read-only mode is offered the shell only where a sandbox confines it."""
    return mode not in READ_ONLY_MODES or sandbox_in_force(sandbox_opted_out()).available


async def _shell(ctx: ToolContext, args: ShellArgs) -> str:
    network = bool(ctx.services.get("network", False))
    skip_sandbox = opted_out(ctx)
    sandbox = sandbox_in_force(skip_sandbox)
    refusal = shell_refusal(not ctx.read_only, sandbox, skip_sandbox)
    if refusal:
        raise PermissionDeniedError(refusal)
    workdir = Path(ctx.workdir).resolve()
    check_command(ctx.mode, args.argv, workdir=workdir, network=network)
    _refuse_credential_args(args.argv, workdir)
    # hardened reads the repository's config with git: off the loop.
    argv = await asyncio.to_thread(hardened, ctx.mode, args.argv, workdir)
    result = await run_command(
        argv,
        workdir=workdir,
        run_dir=Path(ctx.run_dir),
        writable=not ctx.read_only,
        network=network,
        timeout_s=args.timeout_s,
        output_cap=OUTPUT_CAP,
        hidden_paths=[Path(p) for p in ctx.services.get("hidden_paths", [])],
        extra_writable=[Path(p) for p in ctx.services.get("extra_writable", [])],
        sandbox=sandbox,
    )
    text = f"exit_code: {result.exit_code}\n{result.output}"
    if result.timed_out:
        text += f"\n(timed out after {args.timeout_s:g}s)"
    return default_redactor().redact(text)


SHELL_TOOL = Tool(
    name="shell",
    description=(
        "Run a command in the workdir, as an argv list. Read-only modes allow only read-only "
        "commands (and test runners in test mode)."
    ),
    args_model=ShellArgs,
    effect=Effect.ONCE,
    body=_shell,
    offered=offered_in,
)
