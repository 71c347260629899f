"""The kept executor (issue 35 item 4): one confined process per layout runs each command as
a child. Reused, confined like a one-shot sandbox, and failing closed when it dies."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from swarmdeck.secrets.store import CredentialStore
from swarmdeck.tools.jail import executors
from swarmdeck.tools.jail.command import EXECUTOR
from swarmdeck.tools.jail.kept import ExecutorGoneError
from swarmdeck.tools.sandbox import (
    SANDBOX_ENV,
    CommandResult,
    SandboxInfo,
    detect_sandbox,
    run_command,
)
from swarmdeck.workspace.rundir import RunDir
from tests.machine_load import stretched_by_load

KEY = "sk-test-abcdefghijklmnopqrstuvwxyz0123"

pytestmark = pytest.mark.sandbox


@dataclass
class Place:
    """A workdir, a run dir under the swarmdeck home, the home's credentials, and a dir
    outside both."""

    workdir: Path
    run_dir: Path
    creds: Path
    outside: Path
    sandbox: SandboxInfo


@pytest.fixture(params=["bwrap", "landlock"])
def place(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Place]:
    """A run under bubblewrap, then under Landlock; a layout this machine lacks skips."""
    monkeypatch.setenv(SANDBOX_ENV, request.param)
    info = detect_sandbox()
    if info.kind != request.param:
        pytest.skip(f"{request.param} does not work here: {info.reason}")
    home = tmp_path / "sd-home"
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    store = CredentialStore(home / "credentials")
    store.set("openai", KEY)
    workdir, outside = tmp_path / "work", tmp_path / "outside"
    workdir.mkdir()
    outside.mkdir()
    run = RunDir.create(home / "runs", f"run-{uuid.uuid4().hex[:8]}")
    yield Place(workdir, run.path.resolve(), store.directory, outside, info)
    executors.stop_all()


async def _run(
    place: Place, argv: list[str], *, writable: bool = True, timeout_s: float = 30
) -> CommandResult:
    return await run_command(
        argv, workdir=place.workdir, run_dir=place.run_dir, writable=writable, network=False,
        timeout_s=timeout_s, sandbox=place.sandbox,
    )  # fmt: skip


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def _executor_process(started_as: int) -> int:
    """The python executor's pid: `started_as` itself (Landlock) or inside its bwrap."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read()
            pid = int(name)
            while pid > 1 and pid != started_as:
                pid = _parent(pid)
        except OSError:
            continue
        if str(EXECUTOR).encode() in cmdline and pid == started_as:
            return int(name)
    raise AssertionError(f"no executor below pid {started_as}")


def _state(pid: int) -> str | None:
    """The process's state letter (Z: a zombie), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _alive_with(token: str) -> list[int]:
    """Processes whose command line holds `token`."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                if token.encode() in handle.read():
                    found.append(int(name))
        except (OSError, ValueError):
            continue
    return found


def _descendants(root: int) -> set[int]:
    """The processes below `root` in the process tree, now."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as handle:
                parents[int(name)] = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


async def test_second_command_reuses_the_executor(place: Place) -> None:
    first = await _run(place, ["sh", "-c", "echo one"])
    before, pids = executors.started(), executors.running(str(place.run_dir))
    second = await _run(place, ["sh", "-c", "echo two; exit 3"])
    assert (first.exit_code, first.output) == (0, "one\n")
    assert (second.exit_code, second.output) == (3, "two\n")
    assert second.sandbox == place.sandbox.kind
    # No new bwrap or Landlock executor: the same process ran the second command.
    assert executors.started() == before
    assert executors.running(str(place.run_dir)) == pids and len(pids) == 1


async def test_executor_keeps_the_home_and_the_outside_out(place: Place) -> None:
    await _run(place, ["true"])  # the executor is up before the attempts
    before = executors.started()
    key_files = [str(p) for p in place.creds.rglob("*") if p.is_file()]
    assert key_files
    read = await _run(place, ["cat", *key_files])
    assert read.exit_code != 0 and KEY not in read.output
    listed = await _run(place, ["ls", str(place.creds)])
    assert listed.exit_code != 0
    target = place.outside / "escaped"
    wrote = await _run(place, ["sh", "-c", f"echo x > {target}"])
    assert wrote.exit_code != 0 and not target.exists()
    # Inside its tree the same executor may write.
    inside = await _run(place, ["sh", "-c", "echo x > made.txt"])
    assert inside.exit_code == 0 and (place.workdir / "made.txt").exists()
    assert executors.started() == before


async def test_executor_killed_mid_command_fails_closed(place: Place) -> None:
    await _run(place, ["true"])
    before = executors.started()
    (executor,) = executors.running(str(place.run_dir))
    token = f"{30 + int(uuid.uuid4().int % 1000) / 1000:.3f}"
    running = asyncio.create_task(_run(place, ["sh", "-c", f"touch up; exec sleep {token}"]))
    deadline = time.monotonic() + stretched_by_load(10)
    while not (place.workdir / "up").exists() or not _alive_with(token):
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.02)
    os.kill(_executor_process(executor), signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(ExecutorGoneError, match="executor ended while the command ran"):
        await asyncio.wait_for(running, stretched_by_load(10))
    assert time.monotonic() - started < stretched_by_load(5)
    # The command went with its executor; nothing of it runs on.
    while _alive_with(token):
        assert time.monotonic() < deadline + 5, "the command outlived its executor"
        await asyncio.sleep(0.02)
    # The next command gets a new executor, confined as before.
    after = await _run(place, ["cat", *(str(p) for p in place.creds.rglob("*") if p.is_file())])
    assert after.exit_code != 0 and KEY not in after.output
    assert executors.started() == before + 1


_OWNER = """
import asyncio, sys
from pathlib import Path
from swarmdeck.tools.sandbox import detect_sandbox, run_command

async def main():
    await run_command(
        ["sh", "-c", "touch up; exec sleep " + sys.argv[3]], workdir=Path(sys.argv[1]),
        run_dir=Path(sys.argv[2]), writable=True, network=False, timeout_s=60,
        sandbox=detect_sandbox(),
    )

asyncio.run(main())
"""


async def test_owner_killed_takes_executor_and_commands_along(place: Place) -> None:
    token = f"{40 + int(uuid.uuid4().int % 1000) / 1000:.3f}"
    owner = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _OWNER, str(place.workdir), str(place.run_dir), token
    )
    deadline = time.monotonic() + stretched_by_load(15)
    while not (place.workdir / "up").exists() or not _alive_with(token):
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.02)
    # This owner's executor only: other tests (other xdist workers) run executors too.
    kept = set(_alive_with(str(EXECUTOR))) & _descendants(owner.pid)
    assert kept, "no executor ran the command"
    owner.kill()  # SIGKILL: no atexit, no cleanup; the executor reads end of file
    await owner.wait()
    # Counted from the kill: on a loaded machine the start alone can take most of 15 s.
    gone_by = time.monotonic() + stretched_by_load(5)
    while _alive_with(token) or set(_alive_with(str(EXECUTOR))) & kept:
        assert time.monotonic() < gone_by, "the executor or its command outlived swarmdeck"
        await asyncio.sleep(0.05)


async def test_executor_killed_between_commands_is_replaced(place: Place) -> None:
    await _run(place, ["true"])
    before = executors.started()
    (executor,) = executors.running(str(place.run_dir))
    killed = _executor_process(executor)
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + stretched_by_load(10)
    while _state(killed) not in ("Z", None):  # dead, if not yet reaped
        assert time.monotonic() < deadline, "SIGKILL did not end the executor"
        await asyncio.sleep(0.01)
    # Whether or not swarmdeck has seen the death yet, the next command runs once,
    # confined, in a new executor.
    result = await _run(place, ["sh", "-c", "echo once >> ran.txt; cat ran.txt"])
    assert (result.exit_code, result.output) == (0, "once\n")
    assert executors.started() == before + 1
    assert executors.running(str(place.run_dir)) != [executor]


async def test_cancelled_command_is_killed_and_the_executor_kept(place: Place) -> None:
    await _run(place, ["true"])
    before, pids = executors.started(), executors.running(str(place.run_dir))
    token = f"{50 + int(uuid.uuid4().int % 1000) / 1000:.3f}"
    running = asyncio.create_task(_run(place, ["sh", "-c", f"touch up; exec sleep {token}"]))
    deadline = time.monotonic() + stretched_by_load(10)
    while not _alive_with(token):
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.02)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    while _alive_with(token):
        assert time.monotonic() < deadline + 5, "the cancelled command ran on"
        await asyncio.sleep(0.02)
    assert (await _run(place, ["sh", "-c", "echo next"])).output == "next\n"
    assert executors.started() == before and executors.running(str(place.run_dir)) == pids
