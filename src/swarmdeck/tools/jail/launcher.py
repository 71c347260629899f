"""Runs one tool command outside bubblewrap: confined by Landlock when asked, and supervised
so that nothing it starts outlives it.

Usage: python -I -S launcher.py [--network] [--landlock] [--read=PATH | --write=PATH |
--list=PATH | --device=PATH]... -- PROGRAM ARGS...

Standard library only, few imports (no json, no re: each costs milliseconds at every tool
call), and run by file path: starting it costs an interpreter start and nothing of
swarmdeck.

The launcher is a child subreaper: a daemon the command starts (even one that called
setsid and left the process group) is reparented to it, and is killed when the command
ends or when the launcher is told to stop (SIGTERM). If the launcher itself dies, the
command gets SIGKILL (parent-death signal).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CAP_VERSION_3 = 0x20080522
MAX_CAP = 64
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg: int = 0) -> int:
    return _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0)


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _new_network_namespace() -> None:
    """An empty network namespace (no UDP, no TCP, no unix abstract sockets of the host):
    as root directly, else inside a user namespace mapping our own ids; best effort."""
    if _libc.unshare(CLONE_NEWNET) == 0:
        return
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError:
        pass


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _drop_capabilities() -> None:
    """Leave no capability, now or after exec (root included): bounding set, ambient, all."""
    for cap in range(MAX_CAP):
        _prctl(PR_CAPBSET_DROP, cap)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    data = (_CapData * 2)()
    _libc.capset(ctypes.byref(_CapHeader(CAP_VERSION_3, 0)), data)


def parse(argv: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The options before `--` (each a list of values; a flag's is [""]), and the command."""
    options: dict[str, list[str]] = {}
    for i, arg in enumerate(argv):
        if arg == "--":
            return options, argv[i + 1 :]
        if not arg.startswith("--"):
            break
        name, _, value = arg[2:].partition("=")
        options.setdefault(name, []).append(value)
    raise SystemExit("usage: launcher.py [OPTIONS] -- PROGRAM ARGS...")


def _confine(options: dict[str, list[str]]) -> None:
    """In the child, before exec: no network, Landlock, no capabilities."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    network = "network" in options
    if not network:
        _new_network_namespace()
    if "landlock" in options:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import landlock  # a sibling file, found by path

        landlock.restrict_self(
            read=options.get("read", []),
            write=options.get("write", []),
            listable=options.get("list", []),
            devices=options.get("device", []),
            network=network,
        )
    _drop_capabilities()


def _run_child(spec: dict[str, list[str]], argv: list[str]) -> None:
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, *STOP_SIGNALS):
        signal.signal(sig, signal.SIG_DFL)
    try:
        _confine(spec)
    except OSError as exc:
        # Fail closed: a sandbox that cannot be set up is not skipped.
        os.write(2, f"swarmdeck: the sandbox could not be set up: {exc}\n".encode())
        os._exit(126)
    try:
        os.execvp(argv[0], argv)
    except FileNotFoundError:
        os.write(2, f"command not found: {argv[0]}\n".encode())
        os._exit(127)
    except OSError as exc:
        os.write(2, f"cannot run {argv[0]}: {exc.strerror}\n".encode())
        os._exit(126)


def children() -> list[int]:
    """This process's children (orphans it adopted included)."""
    me = os.getpid()
    try:
        with open(f"/proc/self/task/{me}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        pass
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            found.append(int(name))
    return found


def _kill_children() -> None:
    for pid in children():
        try:  # noqa: SIM105 - contextlib costs an import at every tool call
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _supervise(main_pid: int) -> int:
    """Wait for the command; then kill and reap whatever it left. Its wait status."""

    def stop(_signum: int, _frame: object) -> None:
        _kill_children()

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)
    status = None
    while True:
        if status is not None:
            _kill_children()
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == main_pid:
            status = wait_status
    return status if status is not None else 0


def main(argv: list[str]) -> None:
    """Launch, confine and supervise one command; exit as it exited."""
    options, command = parse(argv[1:])
    if not command:
        raise SystemExit("usage: launcher.py [OPTIONS] -- PROGRAM ARGS...")
    parent = os.getppid()
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the caller died before the line above
        os._exit(137)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    pid = os.fork()
    if pid == 0:
        _run_child(options, command)
    status = _supervise(pid)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:  # noqa: SIM105
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL has no handler to reset
            pass
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main(sys.argv)
