"""Kept executors: one confined executor (jail/executor.py) per layout, started by the first
command that needs it and reused by the next, so a command pays a fork and an exec, not a
sandbox's start.

An executor is keyed by its layout (bubblewrap's arguments or Landlock's rules; they name
the run dir, so a session's executor serves that session alone) and by which file each path
of the layout names now: a command whose one-shot sandbox would differ gets another
executor. One is stopped when its root session ends (runtime/status.py), when idle for
IDLE_S, when a newer layout of its run dir replaces it, at exit, and when this process dies: the executor reads end of file on its
control socket and stops every command it runs.
"""

from __future__ import annotations

import array
import asyncio
import atexit
import json
import os
import socket
import struct
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmdeck.tools.jail.command import Layout

HEADER = struct.Struct("!I")  # a request's length, as executor.py reads it
IDLE_S = 300.0
MAX_KEPT = 16
START_TIMEOUT_S = 10.0
SEND_TIMEOUT_S = 1.0
STOP_GRACE_S = 5.0

Key = tuple[str, tuple[str, ...], tuple[tuple[int, int] | None, ...], str]


class StartError(OSError):
    """An executor could not be started (the one-shot path then says why, as it always has)."""


@dataclass(eq=False)
class Executor:
    """One running executor and the socket that feeds it requests."""

    layout: Layout
    run_dir: str
    proc: subprocess.Popen[bytes]
    control: socket.socket
    lock: threading.Lock = field(default_factory=threading.Lock)
    busy: int = 0
    last_used: float = field(default_factory=time.monotonic)
    # Seen failing (a command's channel ended early): never handed out again.
    broken: bool = False

    @property
    def alive(self) -> bool:
        """True while the executor's process runs and has not failed a command."""
        return not self.broken and self.proc.poll() is None

    def send(self, request: dict[str, Any], out_fd: int, channel: socket.socket) -> None:
        """One request, with the command's output pipe and its channel; OSError if the
        executor is gone (the command then never started)."""
        data = HEADER.pack(len(body := json.dumps(request).encode())) + body
        fds = array.array("i", [out_fd, channel.fileno()])
        with self.lock:
            sent = self.control.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            if sent < len(data):
                self.control.sendall(data[sent:])

    def stop(self) -> None:
        """Close the control socket: the executor stops all it runs, and exits."""
        if self.control.fileno() == -1:
            return  # stopped already
        self.control.close()
        threading.Thread(target=_reap, args=(self.proc,), daemon=True).start()


def _reap(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class _Pool:
    """The executors of this process, and the one thread that starts them all: bubblewrap's
    --die-with-parent follows the thread that started it, so that thread must live on."""

    kept: dict[Key, Future[Executor]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    spawner: ThreadPoolExecutor | None = None
    started: int = 0

    def spawn(self, layout: Layout, run_dir: str, env: dict[str, str]) -> Future[Executor]:
        if self.spawner is None:
            self.spawner = ThreadPoolExecutor(1, thread_name_prefix="swarmdeck-executors")
            threading.Thread(
                target=_stop_idle, name="swarmdeck-executors-idle", daemon=True
            ).start()
        return self.spawner.submit(self._start, layout, run_dir, env)

    def _start(self, layout: Layout, run_dir: str, env: dict[str, str]) -> Executor:
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                layout.executor_line(theirs.fileno()), env=env, cwd="/",
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),), start_new_session=True,
            )  # fmt: skip
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.settimeout(START_TIMEOUT_S)
        try:
            reply = ours.recv(4096)
        except OSError:
            reply = b""
        if reply != b"ready":
            ours.close()
            _reap(proc, grace_s=0)
            raise StartError(f"the executor did not start: {reply.decode(errors='replace')}")
        # A request is sent from the event loop: an executor that stopped reading must not
        # block it for long (the send fails; the command never started and runs elsewhere).
        ours.settimeout(SEND_TIMEOUT_S)
        with self.lock:
            self.started += 1
        return Executor(layout, run_dir, proc, ours)


_POOL = _Pool()


def started() -> int:
    """How many executors this process has started (the tests see reuse by it)."""
    return _POOL.started


def running(run_dir: str) -> list[int]:
    """The pids the live executors of `run_dir` were started as (bwrap's, or their own)."""
    with _POOL.lock:
        found = [_usable(future) for future in _POOL.kept.values()]
    return [e.proc.pid for e in found if e is not None and e.run_dir == run_dir]


def _started(future: Future[Executor]) -> Executor | None:
    """The executor a start made, once it did (not one that failed or was cancelled)."""
    if not future.done() or future.cancelled() or future.exception() is not None:
        return None
    return future.result()


def _usable(future: Future[Executor]) -> Executor | None:
    executor = _started(future)
    return executor if executor is not None and executor.alive else None


def _stop_idle() -> None:
    """Stop idle executors though no command comes (a session that ended)."""
    while True:
        time.sleep(IDLE_S / 5)
        with _POOL.lock:
            _sweep(time.monotonic(), None)


def _sweep(now: float, keep: Key | None) -> None:
    """Drop dead executors; stop the idle ones, those past MAX_KEPT first."""
    idle: list[tuple[float, Key, Executor]] = []
    for key, future in list(_POOL.kept.items()):
        if not future.done():
            continue
        executor = _usable(future)
        if executor is None:
            del _POOL.kept[key]
        elif executor.busy == 0 and key != keep:
            idle.append((executor.last_used, key, executor))
    idle.sort(key=lambda found: found[0])
    excess = len(_POOL.kept) - MAX_KEPT
    for rank, (last_used, key, executor) in enumerate(idle):
        if rank < excess or now - last_used > IDLE_S:
            del _POOL.kept[key]
            executor.stop()


def _retire(run_dir: str, key: Key) -> None:
    """Stop the idle executors of `run_dir` and of the same sandbox that a new layout
    replaces (a file it covered was replaced, a mode changed)."""
    for other, future in list(_POOL.kept.items()):
        executor = _usable(future)
        if (
            other[0] == key[0]
            and other != key
            and executor
            and executor.run_dir == run_dir
            and executor.busy == 0
        ):
            del _POOL.kept[other]
            executor.stop()


def key_of(layout: Layout, run_dir: Path) -> Key:
    """What an executor serves: its layout, as its paths' files are now, in a run dir."""
    return (layout.runner, layout.args, layout.fingerprint(), str(run_dir))


async def acquire(key: Key, layout: Layout, env: dict[str, str]) -> Executor | None:
    """The running executor of `key`, started if need be; None if it cannot start."""
    run_dir = key[3]
    with _POOL.lock:
        _sweep(time.monotonic(), key)
        future = _POOL.kept.get(key)
        if future is None or (future.done() and _usable(future) is None):
            _retire(run_dir, key)
            future = _POOL.kept[key] = _POOL.spawn(layout, run_dir, env)
    starting = asyncio.wrap_future(future)
    try:
        # Shielded: a caller cancelled (its session was) must not cancel a start that other
        # commands wait on, nor leave a cancelled one in the pool.
        executor = await asyncio.shield(starting)
    except asyncio.CancelledError:
        starting.add_done_callback(_heard)
        raise
    except OSError:
        with _POOL.lock:
            if _POOL.kept.get(key) is future:
                del _POOL.kept[key]
        return None
    with _POOL.lock:
        executor.busy += 1
    return executor


def _heard(starting: asyncio.Future[Executor]) -> None:
    """Take a start's outcome that no caller waits for any more (asyncio would log it)."""
    if not starting.cancelled():
        starting.exception()


def release(executor: Executor, *, failed: bool = False) -> None:
    """A command is done with `executor`. One that `failed` it is handed out no more, and
    stopped once its other commands (a sub-agent's, sharing the run dir) are done, or now
    if it is dead; the next command starts a new one."""
    with _POOL.lock:
        executor.busy -= 1
        executor.last_used = time.monotonic()
        executor.broken = executor.broken or failed
        if executor.broken and (executor.busy == 0 or executor.proc.poll() is not None):
            executor.stop()
        if not executor.alive:
            for key, future in list(_POOL.kept.items()):
                if _started(future) is executor:
                    del _POOL.kept[key]


def stop_run_dir(run_dir: str) -> None:
    """Stop the idle executors of a run dir (its session ended); a busy one stops when its
    command is done and idles past IDLE_S, as before."""
    resolved = str(Path(run_dir).resolve())
    with _POOL.lock:
        for key, future in list(_POOL.kept.items()):
            executor = _usable(future)
            if key[3] == resolved and executor is not None and executor.busy == 0:
                del _POOL.kept[key]
                executor.stop()


def stop_all() -> None:
    """Stop every executor of this process (at exit; its commands are stopped with it)."""
    with _POOL.lock:
        kept, _POOL.kept = _POOL.kept, {}
    for future in kept.values():
        if (executor := _started(future)) is not None:
            executor.stop()


def _forget_in_child() -> None:
    """A forked child owns none of its parent's executors: it closes its copies of their
    sockets (so an executor still ends with its owner) and starts its own."""
    global _POOL
    for future in _POOL.kept.values():
        if (executor := _started(future)) is not None:
            executor.control.close()
    _POOL = _Pool()


atexit.register(stop_all)
os.register_at_fork(after_in_child=_forget_in_child)
