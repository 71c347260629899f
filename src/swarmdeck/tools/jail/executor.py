"""A confined executor: one long-lived process that runs many tool commands as its children,
so a command pays a spawn, not a sandbox's start (jail/executors.py starts it).

Usage: python -I -S executor.py [launcher options] [--bwrap] --control=FD --

It is started inside bubblewrap (`--bwrap`: already confined, and exec failures read as
bubblewrap's), or, with `--landlock`, outside it: then it builds the Landlock ruleset once
and each command's supervisor enforces it on itself before it spawns the command (the rules
of launcher.py, the network namespace made once here). Standard library only, like the
launcher.

Requests come over the control socket FD: a 4-byte length, a JSON object (argv, env, cwd,
umask) and two descriptors, the write end of the command's output pipe and one end of a
per-command socket. A spare supervisor, forked before the request came, reads it off the
control socket itself (the executor forks the next spare as the command runs): a
subreaper in its own session that says
`pid PID` on the per-command socket, takes on the command's cwd, umask and Landlock domain,
spawns it (vfork: no copy of this process's pages), waits for it, kills whatever it left
behind (a daemon that called setsid included) and reports `exit STATUS`. `kill`, or the far
end closing, kills the command's whole tree. When the control socket reaches end of file
(the swarmdeck process closed it or died, SIGKILL included) every supervisor is stopped and
the executor exits.
"""

from __future__ import annotations

import array
import gc
import json
import os
import select
import signal
import socket
import struct
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import launcher

HEADER = struct.Struct("!I")
MAX_FDS = 2


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One request's frame (its length, its JSON) and its descriptors; EOFError once the
    far end is closed."""
    fds = array.array("i")
    header, ancdata, _flags, _addr = sock.recvmsg(
        HEADER.size, socket.CMSG_LEN(MAX_FDS * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    if not header:
        raise EOFError
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    header += _recv_exact(sock, HEADER.size - len(header))
    return header + _recv_exact(sock, HEADER.unpack(header)[0]), list(fds)


def _wakeup_pipe() -> int:
    """A pipe SIGCHLD writes to, so a poll() wakes when a child ends."""
    read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    signal.set_wakeup_fd(write)
    return read


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


# What a command starts with at their defaults (Python ignores or handles them here).
# A supervisor ignores what its command may send it (`kill $PPID`), as bubblewrap's pid 1
# and a launcher outside the Landlock domain were out of its reach.
SUPERVISOR_IGNORES = (*launcher.STOP_SIGNALS, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
                      signal.SIGALRM)  # fmt: skip
RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, *SUPERVISOR_IGNORES)


def _failed(argv0: str, exc: OSError, as_bwrap: bool) -> tuple[str, int]:
    """Why the command could not start, and its exit code, in the words of the one-shot
    path it replaces."""
    if as_bwrap:
        return f"bwrap: execvp {argv0}: {exc.strerror}", 1
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {argv0}", 127
    return f"cannot run {argv0}: {exc.strerror}", 126


def _find(argv0: str, path: str) -> str:
    """The program execvp would run for argv0 with this PATH."""
    if "/" in argv0:
        return argv0
    denied = None
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", argv0)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            denied = denied or candidate
    if denied:
        raise PermissionError(13, os.strerror(13), denied)
    raise FileNotFoundError(2, os.strerror(2), argv0)


def _spawn(request: dict, out_fd: int, devnull: int, ruleset: int | None) -> tuple[int, int]:
    """Start the command: this supervisor takes on its umask, cwd and Landlock domain (the
    command inherits them) and spawns it without copying itself (vfork: a fork would copy
    every page it touches). (pid, 0), or (0, exit code) when it could not start."""
    argv, env = request["argv"], request["env"]
    try:
        os.umask(request["umask"])
        os.chdir(request["cwd"])
        if ruleset is not None:
            import landlock  # a sibling file, imported once by the executor already

            landlock.enforce(ruleset)
    except OSError as exc:
        # Fail closed: a sandbox that cannot be set up is not skipped.
        os.write(out_fd, f"swarmdeck: the sandbox could not be set up: {exc}\n".encode())
        return 0, 126
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, out_fd, 1),
               (os.POSIX_SPAWN_DUP2, out_fd, 2)]  # fmt: skip
    try:
        program = _find(argv[0], env.get("PATH", os.defpath))
        return os.posix_spawn(program, argv, env, file_actions=actions, setsigdef=RESET_SIGNALS), 0
    except OSError as exc:
        message, code = _failed(argv[0], exc, request.get("bwrap", False))
        os.write(out_fd, f"{message}\n".encode())
        return 0, code


def _reap(main_pid: int, status: int | None) -> tuple[int | None, bool]:
    """Reap every child that ended; (the command's wait status if known, any child left)."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, False
        if pid == 0:
            return status, True
        if pid == main_pid:
            status = wait_status


def _kill_listed(children: int) -> None:
    """SIGKILL the children /proc lists in the open file `children`."""
    for pid in os.pread(children, 65536, 0).split():
        try:  # noqa: SIM105
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _watch(main_pid: int, channel: socket.socket, wakeup: int, children: int) -> int:
    """Wait for the command and whatever it left; kill all of it on `kill` or when the
    swarmdeck end goes away. The command's wait status (SIGKILL's when it was killed)."""
    poller = select.poll()
    poller.register(wakeup, select.POLLIN)
    poller.register(channel, select.POLLIN)
    status, stopping = None, False
    while True:
        status, left = _reap(main_pid, status)
        if not left:
            return status if status is not None else signal.SIGKILL
        if status is not None or stopping:
            _kill_listed(children)
        for fd, _event in poller.poll():
            if fd == wakeup:
                _drain(wakeup)
            elif not stopping:
                try:
                    message = channel.recv(64)
                except OSError:
                    message = b""
                if message in (b"", b"kill"):
                    stopping = True
                    poller.unregister(channel)
                    _kill_listed(children)


def supervise(
    request: dict, fds: list[int], devnull: int, ruleset: int | None, wakeup: int, children: int
) -> None:
    """The supervisor of one command (a spare of the executor's); never returns."""
    out_fd, channel_fd = fds
    channel = socket.socket(fileno=channel_fd)
    try:
        channel.sendall(b"pid %d\n" % os.getpid())
    except OSError:
        os._exit(1)
    pid, code = _spawn(request, out_fd, devnull, ruleset)
    os.close(out_fd)
    status = _watch(pid, channel, wakeup, children) if pid else code << 8
    try:  # noqa: SIM105 - contextlib costs an import
        channel.sendall(b"exit %d\n" % status)
    except OSError:
        pass
    os._exit(0)


@dataclass
class Spare:
    """A supervisor forked before its request comes, so a command does not wait for the
    fork (copying the executor's pages costs milliseconds on some machines)."""

    pid: int
    sock: socket.socket


def fork_spare(control: socket.socket, devnull: int, ruleset: int | None, bwrap: bool) -> Spare:
    """A new spare: it reads the next request off the control socket itself (one hop less),
    tells the executor (`t`: took one; `e`: the control socket ended), then supervises."""
    executor = os.getpid()
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid:
        theirs.close()
        return Spare(pid, ours)
    ours.close()
    launcher._prctl(launcher.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != executor:  # the executor died before the line above
        os._exit(1)
    os.setsid()
    # All a supervisor sets up before its request: what the command waits for is less.
    signal.set_wakeup_fd(-1)
    wakeup = _wakeup_pipe()
    for sig in SUPERVISOR_IGNORES:
        signal.signal(sig, signal.SIG_IGN)
    launcher._prctl(launcher.PR_SET_CHILD_SUBREAPER, 1)
    # Opened before Landlock confines this supervisor with its command (/proc is not granted).
    children = os.open(f"/proc/self/task/{os.getpid()}/children", os.O_RDONLY | os.O_CLOEXEC)
    try:
        frame, fds = receive(control)
    except (EOFError, OSError):
        theirs.sendall(b"e")
        os._exit(0)
    # Done with the control socket before the next spare may read it.
    control.close()
    theirs.sendall(b"t")
    theirs.close()
    # An executor that died as this request came takes it along: the command must not
    # start (swarmdeck, seeing no `pid`, runs it in a new executor instead).
    if len(fds) != MAX_FDS or os.getppid() != executor:
        os._exit(1)
    request = json.loads(frame[HEADER.size :])
    request["bwrap"] = bwrap
    supervise(request, fds, devnull, ruleset, wakeup, children)
    raise AssertionError("supervise returned")


def _confine_self(options: dict[str, list[str]]) -> int | None:
    """Once, for every command to come: no network, Landlock's ruleset built (each command
    enforces it on itself), no capabilities. The ruleset's descriptor, if any."""
    launcher._prctl(launcher.PR_SET_CHILD_SUBREAPER, 1)
    network = "network" in options
    if not network and "bwrap" not in options:  # bubblewrap made the namespace
        launcher._new_network_namespace()
    ruleset = None
    if "landlock" in options:
        import landlock

        ruleset = landlock.build_ruleset(
            read=options.get("read", []),
            write=options.get("write", []),
            listable=options.get("list", []),
            devices=options.get("device", []),
            network=network,
        )
    launcher._drop_capabilities()
    return ruleset


def _stop_all(supervisors: set[int]) -> None:
    """Kill every supervisor with its command's group, then whatever they leave here (a
    daemon that left the group is reparented to this subreaper) until nothing is left."""
    for pid in supervisors:
        try:  # noqa: SIM105
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    while True:
        launcher._kill_children()
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def serve(control: socket.socket, ruleset: int | None, bwrap: bool) -> None:
    """Keep one spare supervisor reading the control socket, a new one each time it takes a
    request; until the control socket ends."""
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    wakeup = _wakeup_pipe()
    poller = select.poll()
    poller.register(wakeup, select.POLLIN)
    spare: Spare | None = None
    supervisors: set[int] = set()
    while True:
        if spare is None:
            spare = fork_spare(control, devnull, ruleset, bwrap)
            supervisors.add(spare.pid)
            poller.register(spare.sock, select.POLLIN)
        for fd, _event in poller.poll():
            if fd == wakeup:
                _drain(wakeup)
                _reap_supervisors(supervisors)
                continue
            try:
                said = spare.sock.recv(1)
            except OSError:
                said = b""
            poller.unregister(spare.sock)
            spare.sock.close()
            if said == b"e":
                _stop_all(supervisors)
                return
            # It took a request, or died (the next one reads on): a new spare.
            spare = None


def _reap_supervisors(supervisors: set[int]) -> None:
    """Reap ended supervisors; kill anything else that was reparented here (a supervisor
    killed from outside leaves its command's tree to the executor)."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            break
        supervisors.discard(pid)
    for pid in launcher.children():
        if pid not in supervisors:
            try:  # noqa: SIM105
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def main(argv: list[str]) -> None:
    """Set up the confinement once, say `ready` (or why not), then serve."""
    options, _command = launcher.parse(argv[1:])
    control = socket.socket(fileno=int(options["control"][0]))
    control.set_inheritable(False)
    try:
        ruleset = _confine_self(options)
    except OSError as exc:
        control.sendall(f"the sandbox could not be set up: {exc}".encode())
        os._exit(126)
    control.sendall(b"ready")
    # A collection in a forked supervisor would touch (and so copy) every page of this
    # process: none runs here (the executor makes no cycles worth collecting).
    gc.disable()
    gc.freeze()
    serve(control, ruleset, "bwrap" in options)
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
