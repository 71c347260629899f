"""Running tool commands: which sandbox is in force, a rebuilt environment, a timeout, an
output cap, and nothing left running afterwards.

Three sandboxes, best first: bubblewrap (a new root showing only what tools need, no
network, its own pid namespace), Landlock (the kernel confines the command's reads, writes
and TCP; a network namespace too where one can be made), or none. A command runs in its
session's kept executor for its layout (jail/executors.py: started once, a supervisor per
command kills whatever it left behind); where none can start, in a sandbox of its own: bwrap,
or the launcher (jail/launcher.py) outside bubblewrap.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.secrets.redact import default_redactor
from swarmdeck.tools.bwrap import bwrap_args
from swarmdeck.tools.jail import executors
from swarmdeck.tools.jail.capture import DRAIN_GRACE_S, REAP_GRACE_S, Capture, pump
from swarmdeck.tools.jail.command import Layout, landlock_rules, launcher_options
from swarmdeck.tools.jail.kept import ExecutorGoneError, run_kept
from swarmdeck.tools.jail.opted_out import open_bwrap_args, open_landlock_rules
from swarmdeck.tools.policy import RUNS_ANOTHER_RE
from swarmdeck.tools.sandbox_info import (  # noqa: F401 (the sandbox's public names)
    INSTALL_HINT,
    OPT_OUT_KEEPS,
    OPT_OUT_LIFTS,
    OPTED_OUT_REASON,
    SandboxInfo,
    SandboxKind,
    sandbox_warning,
)
from swarmdeck.tools.visible import default_hidden_paths, swarmdeck_homes_within, tool_path

SANDBOX_ENV = "SWARMDECK_SANDBOX"
OFF_VALUES = frozenset({"off", "0", "false", "no", "none"})
# Variables copied from the parent environment (PATH is rebuilt); everything else is dropped.
ENV_ALLOW = frozenset({"LANG", "LANGUAGE", "TERM", "TZ"})
ENV_ALLOW_PREFIXES = ("LC_",)
# A name with one of these fragments never reaches a tool, even through `extra`.
SECRET_NAME_RE = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# The longest poll interval of a process's end.
POLL_MAX_S = 0.01


@dataclass(frozen=True)
class CommandResult:
    """What a command did: exit code, combined output (capped), and how it ran."""

    exit_code: int
    output: str
    timed_out: bool
    truncated: bool
    sandbox: SandboxKind

    @property
    def sandboxed(self) -> bool:
        """True when a sandbox confined the command."""
        return self.sandbox != "none"


def detect_sandbox() -> SandboxInfo:
    """The best sandbox that works here. SWARMDECK_SANDBOX narrows the choice: `bwrap` or
    `landlock` allow only that one, `off` none (which fails closed: see shell_refusal)."""
    wanted = os.environ.get(SANDBOX_ENV, "").strip().lower() or "auto"
    if wanted in OFF_VALUES:
        return SandboxInfo("none", f"disabled by {SANDBOX_ENV}=off")
    if wanted not in ("auto", "bwrap", "landlock"):
        return SandboxInfo("none", f"{SANDBOX_ENV}={wanted} is not auto, bwrap, landlock or off")
    bwrap = _probe_bwrap() if wanted != "landlock" else None
    if bwrap is not None and bwrap.available:
        return bwrap
    landlock = _probe_landlock() if wanted != "bwrap" else None
    if landlock is not None and landlock.available:
        return landlock
    reasons = [info.reason for info in (bwrap, landlock) if info is not None]
    return SandboxInfo("none", "; ".join(reasons))


def sandbox_in_force(opted_out: bool) -> SandboxInfo:
    """The sandbox a run gets: none when its user opted out, else the best that works."""
    if opted_out:
        return SandboxInfo("none", OPTED_OUT_REASON)
    return detect_sandbox()


def shell_refusal(mode_writes: bool, info: SandboxInfo, opted_out: bool) -> str | None:
    """Why the shell may not run here, or None. Fail closed: without a sandbox a read-only
    mode has no shell, and a write mode only when its user opted out of the sandbox."""
    if info.available:
        return None
    if not mode_writes:
        return (
            f"no shell in a read-only mode without a sandbox ({info.reason}); the file tools "
            f"still work; {INSTALL_HINT}"
        )
    if opted_out:
        return None if home_shield() else no_shield_reason()
    return (
        f"the shell needs a sandbox and none works here ({info.reason}); {INSTALL_HINT}; "
        "or accept running without one: --no-sandbox, or `sandbox: off` in "
        "$SWARMDECK_HOME/settings.yaml"
    )


def home_shield() -> SandboxKind | None:
    """What keeps swarmdeck's home out of an opted-out run's tools: Landlock (it also keeps
    them from tracing the worker), else bubblewrap; None where neither works."""
    for probe in (_probe_landlock, _probe_bwrap):
        info = probe()
        if info.available:
            return info.kind
    return None


def no_shield_reason() -> str:
    """Why an opted-out run's shell refuses where nothing can hide the home from it."""
    why = "; ".join(probe().reason for probe in (_probe_bwrap, _probe_landlock))
    return (
        "the shell refuses: without a sandbox a command still may not see swarmdeck's home "
        f"(its credential store), and nothing here can hide it ({why}); {INSTALL_HINT}, or "
        f"run on Linux 6.7+ (Landlock ABI 4)"
    )


@functools.cache
def _probe_bwrap() -> SandboxInfo:
    """Find bwrap and prove it can build the namespaces we use (containers often forbid it)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return SandboxInfo("none", "bwrap (bubblewrap) is not installed")
    try:
        version = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
        trial = subprocess.run(
            [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-net", "--cap-drop", "ALL",
             "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink",
             "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--dev", "/dev", "--proc",
             "/proc", "--", "true"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxInfo("none", f"bwrap could not be run: {exc}")
    if trial.returncode != 0:
        detail = (trial.stderr.strip().splitlines() or ["no message"])[0]
        return SandboxInfo("none", f"bwrap cannot create a sandbox here: {detail}", version)
    return SandboxInfo("bwrap", f"bubblewrap at {bwrap}", version.removeprefix("bubblewrap "))


@functools.cache
def _probe_landlock() -> SandboxInfo:
    """Whether the kernel's Landlock can confine files and TCP (ABI 4 or later)."""
    from swarmdeck.tools.jail import landlock

    try:
        abi = landlock.abi_version()
    except (OSError, AttributeError) as exc:  # no syscall() in this libc
        return SandboxInfo("none", f"Landlock cannot be asked for: {exc}")
    if abi < landlock.MIN_ABI:
        state = "absent or disabled" if abi == 0 else f"ABI {abi}, below {landlock.MIN_ABI}"
        return SandboxInfo("none", f"Landlock is {state} in this kernel")
    return SandboxInfo("landlock", f"Landlock ABI {abi} (no bubblewrap)", str(abi))


def build_env(run_dir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A fresh environment from an allow-list, with HOME, XDG dirs and TMPDIR under `run_dir`."""
    env = {
        name: value
        for name, value in os.environ.items()
        if (name in ENV_ALLOW or name.startswith(ENV_ALLOW_PREFIXES))
        and not SECRET_NAME_RE.search(name)
    }
    # Only the interpreter's and the system's program dirs: the same PATH the policy
    # resolves a program in, so what it checked is what runs.
    env["PATH"] = tool_path()
    env.setdefault("LANG", "C.UTF-8")
    home, tmp = run_dir / "home", run_dir / "tmp"
    dirs = {
        "HOME": home,
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_STATE_HOME": home / ".local" / "state",
        "TMPDIR": tmp,
    }
    for name, path in dirs.items():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        env[name] = str(path)
    # git must fail, not wait for a password on a terminal nobody watches, and must read no
    # config but the repository's (a global config can name programs to run).
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = "/dev/null"
    for name, value in (extra or {}).items():
        if SECRET_NAME_RE.search(name):
            raise PermissionDeniedError(f"refusing to pass {name} to a tool: it names a secret")
        if RUNS_ANOTHER_RE.match(name):
            raise PermissionDeniedError(f"refusing to pass {name} to a tool: it runs programs")
        kind = default_redactor().contains_secret(value)
        if kind:
            raise PermissionDeniedError(f"refusing to pass {name} to a tool: it holds a {kind}")
        env[name] = value
    return env


async def run_command(
    argv: list[str],
    *,
    workdir: Path,
    run_dir: Path,
    writable: bool,
    network: bool,
    timeout_s: float,
    output_cap: int = 50_000,
    hidden_paths: Sequence[Path] = (),
    extra_writable: Sequence[Path] = (),
    sandbox: SandboxInfo | None = None,
    kept: bool = True,
) -> CommandResult:
    """Run argv (never a shell string) in `sandbox` (default: the best one here) with a
    rebuilt env, a timeout and a capped output: in the kept executor of its layout, or
    (`kept` False, or no executor could start) in a sandbox of its own."""
    if isinstance(argv, str) or not argv:
        raise ToolError("argv must be a non-empty list of strings")
    workdir, run_dir = Path(workdir).resolve(), Path(run_dir).resolve()
    if not workdir.is_dir():
        raise ToolError(f"the workdir does not exist: {workdir}")
    info = sandbox or await asyncio.to_thread(detect_sandbox)
    env, layout, key = await asyncio.to_thread(
        _prepare, info, workdir=workdir, run_dir=run_dir, writable=writable, network=network,
        hidden_paths=hidden_paths, extra_writable=extra_writable,
    )  # fmt: skip
    if kept:
        done = await _run_kept(layout, key, argv, env, workdir, timeout_s, output_cap, info)
        if done is not None:
            return done
    try:
        proc = await asyncio.create_subprocess_exec(
            *layout.command_line(argv),
            cwd=workdir,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # Its own process group, so a timeout kills the command and all it started.
            start_new_session=True,
        )
    except FileNotFoundError:
        return CommandResult(127, f"command not found: {argv[0]}", False, False, info.kind)
    except PermissionError:
        return CommandResult(126, f"permission denied: {argv[0]}", False, False, info.kind)
    return await _supervise(proc, timeout_s, output_cap, info.kind, layout.runner)


def _prepare(
    info: SandboxInfo,
    *,
    workdir: Path,
    run_dir: Path,
    writable: bool,
    network: bool,
    hidden_paths: Sequence[Path],
    extra_writable: Sequence[Path],
) -> tuple[dict[str, str], Layout, executors.Key]:
    """Off the loop, in one go: a run's environment, its layout and its executor's key."""
    env = build_env(run_dir)
    # Every layout hides these: swarmdeck homes (this one, the default, any in the workdir)
    # and the user's credential dirs.
    hidden = [*default_hidden_paths(), *hidden_paths, *swarmdeck_homes_within(workdir)]
    layout = _layout(
        info, env, workdir=workdir, run_dir=run_dir, writable=writable, network=network,
        hidden_paths=hidden, extra_writable=extra_writable,
    )  # fmt: skip
    return env, layout, executors.key_of(layout, run_dir)


async def _run_kept(
    layout: Layout,
    key: executors.Key,
    argv: list[str],
    env: dict[str, str],
    workdir: Path,
    timeout_s: float,
    cap: int,
    info: SandboxInfo,
) -> CommandResult | None:
    """Run argv in the kept executor of `layout`; None when none could take it (it never
    started: the one-shot path runs it, confined the same way)."""
    for _attempt in range(2):  # an executor found dead before the command started: anew
        executor = await executors.acquire(key, layout, env)
        if executor is None:
            return None
        capture = Capture(max(cap, 0))
        try:
            ended = await run_kept(
                executor, argv, env=env, cwd=str(workdir), timeout_s=timeout_s, capture=capture
            )
        except ExecutorGoneError:
            executors.release(executor, failed=True)
            raise
        except BaseException:  # a cancelled call: its command is killed, the executor kept
            executors.release(executor)
            raise
        executors.release(executor, failed=ended is None)
        if ended is not None:
            code, output, truncated = ended.exit_code, capture.text(), capture.truncated
            return CommandResult(code, output, ended.timed_out, truncated, info.kind)
    return None


def _layout(
    info: SandboxInfo,
    env: dict[str, str],
    *,
    workdir: Path,
    run_dir: Path,
    writable: bool,
    network: bool,
    hidden_paths: list[Path],
    extra_writable: Sequence[Path],
    extra_readable: Sequence[Path] = (),
) -> Layout:
    """What confines one run: bwrap, or the launcher (or an executor) with Landlock's rules.
    Without a sandbox the home is still hidden, or the run is refused."""
    places = {
        "workdir": workdir,
        "run_dir": run_dir,
        "extra_writable": extra_writable,
        "extra_readable": extra_readable,
    }
    if info.available:
        places |= {"writable": writable, "hidden_paths": hidden_paths}
        if info.kind == "bwrap":
            return Layout("bwrap", tuple(bwrap_args(env=env, network=network, **places)))
        rules = landlock_rules(**places)
    else:
        shield = home_shield()
        if shield is None:
            raise PermissionDeniedError(no_shield_reason())
        places["hidden_paths"] = hidden_paths
        if shield == "bwrap":
            return Layout("bwrap", tuple(open_bwrap_args(env=env, network=network, **places)))
        rules = open_landlock_rules(**places)
    return Layout("landlock", tuple(launcher_options(network=network, landlock_rules=rules)))


@dataclass(frozen=True)
class Confined:
    """A long-running program's confined command line: argv, environment, what confines it."""

    argv: list[str]
    env: dict[str, str]
    runner: SandboxKind
    sandbox: SandboxInfo


def confine(
    argv: list[str],
    *,
    workdir: Path,
    run_dir: Path,
    writable: bool,
    network: bool,
    readable: Sequence[Path] = (),
    sandbox: SandboxInfo,
) -> Confined:
    """The command line that runs `argv` as a tool would run (an external runner's process,
    which its caller supervises): the same layouts, hidden paths and rebuilt environment,
    with `readable` shown read-only on top (the runner's own install)."""
    workdir, run_dir = workdir.resolve(), run_dir.resolve()
    env = build_env(run_dir)
    hidden = [*default_hidden_paths(), *swarmdeck_homes_within(workdir)]
    layout = _layout(
        sandbox, env, workdir=workdir, run_dir=run_dir, writable=writable,
        network=network, hidden_paths=hidden, extra_writable=(), extra_readable=readable,
    )  # fmt: skip
    return Confined(layout.command_line(argv), env, layout.runner, sandbox)


def _kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads; it may be gone already."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _ask_to_stop(pid: int) -> None:
    """SIGTERM the launcher alone: it kills all the command started (a SIGKILL of the
    whole group first would leave the daemons it adopted to init)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)


async def _wait_exit(proc: asyncio.subprocess.Process, timeout_s: float) -> bool:
    """True once `proc` has exited, False at the deadline.

    Polls `returncode` because on Python 3.11 `proc.wait()` also waits for every holder of
    the output pipe to close it, so a background grandchild would stall it until the timeout.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    delay = 0.002
    while proc.returncode is None:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, POLL_MAX_S)
    return True


async def _supervise(
    proc: asyncio.subprocess.Process,
    timeout_s: float,
    cap: int,
    sandbox: SandboxKind,
    runner: SandboxKind,
) -> CommandResult:
    """Wait for `proc` with a deadline, collecting capped output; kill its group at the end.

    Under bubblewrap the group's SIGKILL ends the pid namespace, daemons with it. Under the
    launcher, the launcher is asked first: it kills what it adopted, then the group goes.
    """
    assert proc.stdout is not None
    capture = Capture(max(cap, 0))
    reader = asyncio.create_task(pump(proc.stdout, capture))
    launched = runner != "bwrap"
    try:
        timed_out = not await _wait_exit(proc, timeout_s)
    except asyncio.CancelledError:
        if launched:
            _ask_to_stop(proc.pid)
            asyncio.get_running_loop().call_later(DRAIN_GRACE_S, _kill_group, proc.pid)
        else:
            _kill_group(proc.pid)
        reader.cancel()
        raise
    if timed_out and launched:
        _ask_to_stop(proc.pid)
        await _wait_exit(proc, REAP_GRACE_S)
    # On timeout, and for background children left behind: the whole group goes. Pids are
    # not reused this fast, so the id still names this command's group.
    _kill_group(proc.pid)
    if timed_out:
        await _wait_exit(proc, REAP_GRACE_S)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(reader), DRAIN_GRACE_S)
    if not reader.done():
        # A process outside the group (it called setsid) still holds the pipe: stop reading.
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    # Close our end of the pipe now, on this loop: left to the garbage collector, the
    # transport would close it on a loop that has ended ("Event loop is closed").
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()
    code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return CommandResult(code, capture.text(), timed_out, capture.truncated, sandbox)
