"""CLI processes for tests, forked from an interpreter that has imported the CLI already.

A `swarmdeck` process spends most of its CPU importing (openai, DBOS, SQLAlchemy: about
3 of the 5 CPU seconds of a one-turn `run` on a slow machine), and the suite starts
hundreds. The fork server imports them once per test process; each call forks a real
process from it, with the call's environment, working directory and stdio, that runs the
CLI's `main()` and exits through the interpreter's normal shutdown (threads joined, atexit
run, stdio flushed). Tests of start-up itself (imports, timings) exec a fresh interpreter,
as does every call when SWARMDECK_TEST_FORK=0.

The server holds no threads and no connections when it forks: it imports and waits.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import re
import runpy
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import IO, Any, NoReturn

# Imported before the first fork: what a CLI call would otherwise import itself.
PRELOAD = (
    "swarmdeck.cli.app",
    "swarmdeck.runtime.host",
    "swarmdeck.models.openai_compat",
    "swarmdeck.models.anthropic",
)


class ForkedProcess:
    """A forked CLI process, with the parts of subprocess.Popen the tests use. Its output
    goes to files, read when it has ended (a process it leaves running cannot hold a
    pipe open and stall the test)."""

    def __init__(
        self,
        server: Path,
        argv: list[str],
        env: dict[str, str],
        options: dict[str, Any],
        output: IO[bytes] | None = None,
    ):
        self.args = ["swarmdeck", *argv]
        self.returncode: int | None = None
        # Kept open until communicate() has read them; the ExitStack closes them. Given an
        # `output` file, stdout and stderr both go there instead, as with
        # Popen(stdout=file, stderr=STDOUT), and communicate() returns them empty.
        self._files = contextlib.ExitStack()
        self._out = output or self._files.enter_context(tempfile.TemporaryFile())  # noqa: SIM115
        self._err = output or self._files.enter_context(tempfile.TemporaryFile())  # noqa: SIM115
        self._own_output = output is None
        self._conn = self._files.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        self._conn.connect(str(server))
        stdin_text = options.pop("stdin_text", None)
        request = {"argv": argv, "env": env, "cwd": os.getcwd(), **options}
        with _stdin_file(stdin_text) as stdin:
            fds = [f.fileno() for f in (stdin, self._out, self._err)]
            socket.send_fds(self._conn, [json.dumps(request).encode()], fds)
        self._buffer = b""
        self.pid = int(self._line(timeout=30)["pid"])

    def poll(self) -> int | None:
        """The exit code if it has ended (minus the signal that killed it), else None."""
        if self.returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; TimeoutExpired past `timeout`."""
        if self.returncode is None:
            try:
                self.returncode = int(self._line(timeout)["code"])
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
            self._conn.close()
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end; its (stdout, stderr)."""
        self.wait(timeout)
        out, err = (_read(self._out), _read(self._err)) if self._own_output else ("", "")
        self._files.close()
        return out, err

    def send_signal(self, signum: int) -> None:
        """Signal the process, unless it has ended."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL it."""
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        """SIGTERM it."""
        self.send_signal(signal.SIGTERM)

    def _line(self, timeout: float | None) -> dict[str, Any]:
        # Not a socket makefile: one cannot be read again after a timeout.
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                raise TimeoutError
            chunk = self._conn.recv(4096)
            if not chunk:
                raise RuntimeError("the CLI fork server hung up")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)


class CliForkServer:
    """The test process's side: starts the server, asks it for processes."""

    def __init__(self, root: Path) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="sd-fork-"))
        self.path = self._dir / "server.sock"
        ready_r, ready_w = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_fork", str(self.path), str(ready_w)],
            cwd=root,
            env=_server_env(),
            pass_fds=(ready_w,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        os.close(ready_w)
        with os.fdopen(ready_r, "rb") as ready:
            if ready.read() != b"ready":
                self._proc.kill()
                raise RuntimeError("the CLI fork server did not start (see its stderr)")

    def start(
        self,
        argv: list[str],
        env: dict[str, str],
        stdin_text: str | None = None,
        new_session: bool = False,
        output: IO[bytes] | None = None,
    ) -> ForkedProcess:
        """Start `swarmdeck ARGV` in a forked process (in a session of its own, as
        Popen(start_new_session=True) would, when `new_session`; its stdout and stderr to
        `output` when given)."""
        options = {"stdin_text": stdin_text, "new_session": new_session}
        return ForkedProcess(self.path, argv, env, options, output)

    def run(
        self, argv: list[str], env: dict[str, str], timeout: float, stdin_text: str | None = None
    ) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of `swarmdeck ARGV` run in a forked process; killed,
        and TimeoutExpired raised like subprocess.run, when it outlives `timeout`."""
        proc = self.start(argv, env, stdin_text)
        try:
            out, err = proc.communicate(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=30)
            raise
        return proc.wait(), out, err

    def close(self) -> None:
        """Stop the server (processes it forked run on to their end)."""
        self._proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10)
        self._proc.kill()
        self._proc.wait()
        with contextlib.suppress(OSError):
            self.path.unlink()
            self._dir.rmdir()


def _server_env() -> dict[str, str]:
    """The server's own environment: the test process's, less its swarmdeck settings and
    anything that looks like a credential (each call brings its own environment; this one
    is what /proc/PID/environ of every forked process shows)."""
    secret = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SWARMDECK_") and not secret.search(k)
    }


def _stdin_file(text: str | None) -> IO[bytes]:
    if text is None:
        return open(os.devnull, "rb")
    f = tempfile.TemporaryFile()  # noqa: SIM115 - the caller's ExitStack closes it
    f.write(text.encode())
    f.seek(0)
    return f


def _read(f: IO[bytes]) -> str:
    f.seek(0)
    return f.read().decode(errors="replace")


# -- the server process --


def _serve(path: str, ready_fd: int) -> dict[str, Any] | None:
    """Accept calls and fork a process for each; returns (in the forked child only) the
    call to run, with its stdio already in place."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    stopping = False

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    os.write(ready_fd, b"ready")
    os.close(ready_fd)
    parent = os.getppid()
    while not stopping and os.getppid() == parent:  # the test process gone: stop too
        for key, _ in selector.select(timeout=0.5):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                call = _fork_call(conn, selector)
                if call is not None:
                    listener.close()
                    return call
            else:  # a forked process ended: tell its caller how
                pidfd = key.fileobj
                conn, pid = key.data
                selector.unregister(pidfd)
                os.close(pidfd)  # type: ignore[arg-type]
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode())
                    conn.sendall(b"\n")
                conn.close()
    return None


def _fork_call(conn: socket.socket, selector: selectors.BaseSelector) -> dict[str, Any] | None:
    """Read one call and fork its process; the child gets the call back, the server None."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    call = json.loads(data)
    sys.stdout.flush()
    sys.stderr.flush()
    # The caller learns the pid once the child has its session and stdio, as Popen's
    # caller does once the child has exec'd: a killpg right after start must reach it.
    set_up_r, set_up_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(set_up_r)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if call["new_session"]:
            os.setsid()
        # Other calls' connections and process fds are not this process's to hold.
        for key in list(selector.get_map().values()):
            if key.data is not None:
                key.data[0].close()
                os.close(key.fd)
        selector.close()
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.write(set_up_w, b"1")
        os.close(set_up_w)
        return call
    for fd in (*fds, set_up_w):
        os.close(fd)
    os.read(set_up_r, 1)
    os.close(set_up_r)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    selector.register(os.pidfd_open(pid), selectors.EVENT_READ, (conn, pid))
    return None


def _run(call: dict[str, Any]) -> NoReturn:
    """In the forked child: become the CLI call, then exit as `python -m swarmdeck` does."""
    os.environ.clear()
    os.environ.update(call["env"])
    os.chdir(call["cwd"])
    sys.argv = ["swarmdeck", *call["argv"]]
    try:
        # As `python -m swarmdeck`: its __main__ module and argv[0], which the help's
        # "Usage:" line is made from.
        runpy.run_module("swarmdeck", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        traceback.print_exc()
        code = 1
    # The interpreter's shutdown, less the teardown of every module the server imported
    # (seconds of CPU in a process that imported both SDKs): wait for non-daemon threads,
    # run atexit, flush.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _exit_code(exc: SystemExit) -> int:
    """The status the interpreter would exit with for this SystemExit."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    import importlib

    from swarmdeck.cli import app

    # Every command module, in the order the CLI's top-level help imports them (which
    # orders its list of commands); each call then finds its own imported.
    app._register(None)
    for module in PRELOAD:
        importlib.import_module(module)
    # What is imported stays out of the children's collections: a collection would touch,
    # and so copy, every page of the server's heap.
    gc.collect()
    gc.freeze()
    call = _serve(sys.argv[1], int(sys.argv[2]))
    if call is not None:
        _run(call)
