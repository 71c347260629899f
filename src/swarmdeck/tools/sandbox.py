"""Running tool commands: a rebuilt environment, a timeout, an output cap, and bubblewrap."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from swarmdeck.config import home_dir
from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.secrets.redact import default_redactor
from swarmdeck.tools.paths import credential_reason

SANDBOX_ENV = "SWARMDECK_SANDBOX"
# Variables copied from the parent environment; everything else is dropped.
ENV_ALLOW = frozenset({"PATH", "LANG", "LANGUAGE", "TERM", "TZ"})
ENV_ALLOW_PREFIXES = ("LC_",)
# A name with one of these fragments never reaches a tool, even through `extra`.
SECRET_NAME_RE = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# How long to wait for the last output once the process is gone (a grandchild that escaped
# the process group can hold the pipe open forever).
DRAIN_GRACE_S = 1.0
# How long a SIGKILLed process may take to be reaped, and the longest poll interval.
REAP_GRACE_S = 5.0
POLL_MAX_S = 0.05
READ_CHUNK = 65_536
# The user's own credentials, hidden from sandboxed commands along with the swarmdeck home.
_USER_SECRETS = (
    ".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc", ".git-credentials",
    ".pgpass", ".pypirc", ".npmrc", ".config/gcloud", ".config/gh", ".codex", ".claude",
    ".claude.json",
)  # fmt: skip
# Host files that only root may read (tools may run as root), and sockets that hand out root
# on the host: a read-only bind does not stop connect().
_HOST_SECRETS = (
    "/etc/shadow", "/etc/gshadow", "/run/docker.sock", "/var/run/docker.sock",
    "/run/containerd", "/run/podman",
)  # fmt: skip


@dataclass(frozen=True)
class SandboxInfo:
    """Whether shell tools run inside bubblewrap here, and why not if they do not."""

    available: bool
    reason: str
    version: str | None = None


@dataclass(frozen=True)
class CommandResult:
    """What a command did: exit code, combined output (capped), and how it ran."""

    exit_code: int
    output: str
    timed_out: bool
    truncated: bool
    sandboxed: bool


def detect_sandbox() -> SandboxInfo:
    """Whether bubblewrap can sandbox commands here (SWARMDECK_SANDBOX=off turns it off)."""
    if os.environ.get(SANDBOX_ENV, "").lower() in ("off", "0", "false", "no"):
        return SandboxInfo(False, f"disabled by {SANDBOX_ENV}=off")
    return _probe_bwrap()


@functools.cache
def _probe_bwrap() -> SandboxInfo:
    """Find bwrap and prove it can build the namespaces we use (containers often forbid it)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return SandboxInfo(False, "bwrap (bubblewrap) is not installed")
    try:
        version = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
        trial = subprocess.run(
            [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-net", "--cap-drop", "ALL",
             "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxInfo(False, f"bwrap could not be run: {exc}")
    if trial.returncode != 0:
        detail = (trial.stderr.strip().splitlines() or ["no message"])[0]
        return SandboxInfo(False, f"bwrap cannot create a sandbox here: {detail}", version)
    return SandboxInfo(True, f"bubblewrap at {bwrap}", version.removeprefix("bubblewrap "))


def build_env(run_dir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A fresh environment from an allow-list, with HOME, XDG dirs and TMPDIR under `run_dir`."""
    env = {
        name: value
        for name, value in os.environ.items()
        if (name in ENV_ALLOW or name.startswith(ENV_ALLOW_PREFIXES))
        and not SECRET_NAME_RE.search(name)
    }
    env.setdefault("PATH", DEFAULT_PATH)
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
    # git must fail, not wait for a password on a terminal nobody watches.
    env["GIT_TERMINAL_PROMPT"] = "0"
    for name, value in (extra or {}).items():
        if SECRET_NAME_RE.search(name):
            raise PermissionDeniedError(f"refusing to pass {name} to a tool: it names a secret")
        kind = default_redactor().contains_secret(value)
        if kind:
            raise PermissionDeniedError(f"refusing to pass {name} to a tool: it holds a {kind}")
        env[name] = value
    return env


def default_hidden_paths() -> list[Path]:
    """Paths every sandboxed command must not see: swarmdeck's home and the user's secrets."""
    user_home = Path.home()
    return [
        home_dir(),
        *(user_home / name for name in _USER_SECRETS),
        *(Path(p) for p in _HOST_SECRETS),
    ]


def _hide(path: Path) -> list[str]:
    """bwrap args that cover `path`: an empty tmpfs for a dir, /dev/null for anything else.

    The /dev/null bind lands on a nodev mount, so opening the covered file fails outright.
    """
    if path.is_dir():
        return ["--tmpfs", str(path)]
    return ["--ro-bind", "/dev/null", str(path)]


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def bwrap_args(
    *,
    workdir: Path,
    run_dir: Path,
    env: Mapping[str, str],
    writable: bool,
    network: bool,
    hidden_paths: Sequence[Path],
    extra_writable: Sequence[Path] = (),
) -> list[str]:
    """The bwrap command line (without the command) for one tool run."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try"]  # fmt: skip
    if not network:
        args.append("--unshare-net")
    # We may run as root: without dropping capabilities, root inside could remount the
    # read-only binds writable.
    args += ["--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    args += ["--tmpfs", "/tmp"]
    # A fresh /tmp must not take away the Python that tools run with (a venv or a checkout
    # under /tmp, as CI and pip's build dirs have): show those read-only again.
    for prefix in _interpreter_dirs_under("/tmp"):
        args += ["--ro-bind", str(prefix), str(prefix)]
    hidden = _existing(hidden_paths)
    # Hide first; then bind the run dir and workdir, outer before inner (runs/ lives under the
    # hidden swarmdeck home; a workdir may live under its run dir and must stay read-only),
    # hiding again after each bind whatever hidden path lies inside it.
    for path in hidden:
        args += _hide(path)
    binds = sorted([(run_dir, True), (workdir, writable)], key=lambda b: len(b[0].parts))
    for root, rw in binds:
        args += ["--bind" if rw else "--ro-bind", str(root), str(root)]
        for path in hidden:
            if path != root and _within(path, root):
                args += _hide(path)
    # A worktree's index and objects live in the main repository: a commit needs them.
    for path in _existing(extra_writable) if writable else []:
        args += ["--bind", str(path), str(path)]
    for path in _workdir_secrets(workdir):
        args += _hide(path)
    args += ["--chdir", str(workdir), "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return args


def _interpreter_dirs_under(root: str) -> list[Path]:
    """The interpreter's install dirs that lie under `root`, outermost only."""
    dirs = {Path(p).resolve() for p in (sys.prefix, sys.exec_prefix, sys.base_prefix)}
    inside = sorted(d for d in dirs if d.is_relative_to(root) and d != Path(root))
    return [d for d in inside if not any(d != o and d.is_relative_to(o) for o in inside)]


def _existing(paths: Sequence[Path]) -> list[Path]:
    """Resolved hidden paths that exist (bwrap cannot mount over a missing path on ro /)."""
    seen: dict[Path, None] = {}
    for raw in paths:
        path = Path(os.path.realpath(raw))
        if path.exists() and path != Path("/"):
            seen[path] = None
    return list(seen)


def _workdir_secrets(workdir: Path) -> list[Path]:
    """Top-level .env files in the workdir: the file tools refuse them, so does the shell."""
    return [
        p
        for p in sorted(workdir.glob(".env*"))
        if p.is_file() and not p.is_symlink() and credential_reason(p)
    ]


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
) -> CommandResult:
    """Run argv (never a shell string) with a rebuilt env, a timeout and a capped output."""
    if isinstance(argv, str) or not argv:
        raise ToolError("argv must be a non-empty list of strings")
    workdir, run_dir = Path(workdir).resolve(), Path(run_dir).resolve()
    if not workdir.is_dir():
        raise ToolError(f"the workdir does not exist: {workdir}")
    info = await asyncio.to_thread(detect_sandbox)
    env = await asyncio.to_thread(build_env, run_dir)
    full = list(argv)
    if info.available:
        prefix = await asyncio.to_thread(
            functools.partial(
                bwrap_args,
                workdir=workdir,
                run_dir=run_dir,
                env=env,
                writable=writable,
                network=network,
                hidden_paths=[*default_hidden_paths(), *hidden_paths],
                extra_writable=extra_writable,
            )
        )
        full = [*prefix, "--", *argv]
    try:
        proc = await asyncio.create_subprocess_exec(
            *full,
            cwd=workdir,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            # Its own process group, so a timeout kills the command and all it started.
            start_new_session=True,
        )
    except FileNotFoundError:
        return CommandResult(127, f"command not found: {argv[0]}", False, False, False)
    except PermissionError:
        return CommandResult(126, f"permission denied: {argv[0]}", False, False, False)
    return await _supervise(proc, timeout_s, output_cap, info.available)


class _Capture:
    """Keeps the head and the tail of a stream within a byte budget."""

    def __init__(self, cap: int) -> None:
        self.head_cap = cap - cap // 2
        self.tail_cap = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk
            del self.tail[: max(0, len(self.tail) - self.tail_cap)]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + self.tail.decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        note = f"\n[... output truncated: {omitted} of {self.total} bytes omitted ...]\n"
        return head + note + self.tail.decode("utf-8", errors="replace")


async def _pump(stream: asyncio.StreamReader, capture: _Capture) -> None:
    while chunk := await stream.read(READ_CHUNK):
        capture.feed(chunk)


def _kill_group(pid: int) -> None:
    """SIGKILL the process group `pid` leads; it may be gone already."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


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
    proc: asyncio.subprocess.Process, timeout_s: float, cap: int, sandboxed: bool
) -> CommandResult:
    """Wait for `proc` with a deadline, collecting capped output; kill its group at the end."""
    assert proc.stdout is not None
    capture = _Capture(max(cap, 0))
    reader = asyncio.create_task(_pump(proc.stdout, capture))
    try:
        timed_out = not await _wait_exit(proc, timeout_s)
    except asyncio.CancelledError:
        _kill_group(proc.pid)
        reader.cancel()
        raise
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
    return CommandResult(code, capture.text(), timed_out, capture.truncated, sandboxed)
