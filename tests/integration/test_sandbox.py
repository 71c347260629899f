"""The sandbox layer with real bubblewrap, and the fallback without it."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from swarmdeck.errors import PermissionDeniedError, UsageError
from swarmdeck.secrets.store import CredentialStore
from swarmdeck.tools.sandbox import CommandResult, build_env, detect_sandbox, run_command
from swarmdeck.workspace.rundir import RunDir
from tests.machine_load import stretched_by_load

# A command killed at its timeout ends well before its 30 s sleep would, however loaded
# the machine (a fixed 5 s is 4.5 s of slack at load 1 and little at load 9 on 2 cores).
WELL_BEFORE_30_S = 5.0

KEY = "sk-test-abcdefghijklmnopqrstuvwxyz0123"

_info = detect_sandbox()
needs_bwrap = pytest.mark.skipif(
    _info.kind != "bwrap", reason=f"needs a working bubblewrap: {_info.reason}"
)


@dataclass
class Dirs:
    """A workdir, a run dir under the swarmdeck home, and a credentials dir with one key."""

    workdir: Path
    run_dir: Path
    creds: Path
    outside: Path


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Dirs:
    home = tmp_path / "sd-home"
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    store = CredentialStore(home / "credentials")
    store.set("openai", KEY)
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "a.txt").write_text("hello\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    run = RunDir.create(home / "runs", "run-1")
    return Dirs(workdir, run.path, store.directory, outside)


async def _run(
    dirs: Dirs,
    argv: list[str],
    *,
    writable: bool = True,
    network: bool = False,
    timeout_s: float = 30,
    **kw: object,
) -> CommandResult:
    return await run_command(
        argv,
        workdir=dirs.workdir,
        run_dir=dirs.run_dir,
        writable=writable,
        network=network,
        timeout_s=timeout_s,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def listener() -> Iterator[int]:
    """A listening loopback socket; connect() succeeds on its backlog without accept()."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        yield srv.getsockname()[1]


def _connect_argv(port: int) -> list[str]:
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('OK')"
    return [sys.executable, "-c", code]


# --- with bubblewrap ------------------------------------------------------------------------


@pytest.mark.sandbox
@needs_bwrap
async def test_read_only_workdir_cannot_be_written(dirs: Dirs) -> None:
    result = await _run(dirs, ["touch", "new.txt"], writable=False)
    assert result.sandboxed and result.exit_code != 0
    assert "Read-only file system" in result.output
    assert not (dirs.workdir / "new.txt").exists()
    # The same command with a writable workdir works: the refusal came from the bind.
    assert (await _run(dirs, ["touch", "new.txt"], writable=True)).exit_code == 0
    assert (dirs.workdir / "new.txt").exists()


@pytest.mark.sandbox
@needs_bwrap
async def test_root_inside_cannot_remount_the_workdir_writable(dirs: Dirs) -> None:
    script = f"mount -o remount,rw,bind {dirs.workdir} {dirs.workdir}; touch {dirs.workdir}/x"
    result = await _run(dirs, ["sh", "-c", script], writable=False)
    assert result.exit_code != 0
    assert not (dirs.workdir / "x").exists()


@pytest.mark.sandbox
@needs_bwrap
async def test_nothing_outside_the_workdir_can_be_written(dirs: Dirs) -> None:
    target = dirs.outside / "x"
    result = await _run(dirs, ["touch", str(target)], writable=True)
    assert result.exit_code != 0 and not target.exists()
    # /tmp inside is a private tmpfs: a write there never reaches the host's /tmp.
    host_tmp = Path("/tmp") / f"swarmdeck-test-{uuid.uuid4().hex}"
    result = await _run(dirs, ["touch", str(host_tmp)], writable=True)
    assert result.exit_code == 0 and not host_tmp.exists()


@pytest.mark.sandbox
@needs_bwrap
async def test_credentials_dir_is_empty_inside(dirs: Dirs) -> None:
    result = await _run(dirs, ["cat", str(dirs.creds / "openai.key")])
    assert result.exit_code != 0
    assert KEY not in result.output and "No such file" in result.output
    # The whole swarmdeck home is covered, so the credentials dir is not even there.
    listing = await _run(dirs, ["ls", "-A", str(dirs.creds)])
    assert "openai.key" not in listing.output
    # The run dir under the same (hidden) swarmdeck home is still usable.
    assert (await _run(dirs, ["touch", str(dirs.run_dir / "tmp" / "f")])).exit_code == 0


@pytest.mark.sandbox
@needs_bwrap
async def test_a_credentials_dir_passed_as_hidden_path_is_an_empty_tmpfs(
    dirs: Dirs, tmp_path: Path
) -> None:
    store = CredentialStore(tmp_path / "elsewhere" / "credentials")
    store.set("glm", KEY)
    result = await _run(
        dirs,
        ["sh", "-c", f"ls -A {store.directory}; cat {store.directory}/glm.key"],
        hidden_paths=[store.directory],
    )
    assert "glm.key: No such file" in result.output and KEY not in result.output


@pytest.mark.sandbox
@needs_bwrap
async def test_nested_layouts_keep_hiding_and_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The swarmdeck home (and so the run dir) inside the workdir.
    workdir = tmp_path / "nested-work"
    home = workdir / ".sd"
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    CredentialStore(home / "credentials").set("openai", KEY)
    run_dir = RunDir.create(home / "runs", "r1").path
    script = f"cat {home}/credentials/openai.key; touch {run_dir}/ok; touch {workdir}/no"
    result = await run_command(
        ["sh", "-c", script],
        workdir=workdir, run_dir=run_dir, writable=False, network=False, timeout_s=30,
    )  # fmt: skip
    assert KEY not in result.output
    assert (run_dir / "ok").exists() and not (workdir / "no").exists()
    # A workdir inside its own (writable) run dir stays read-only.
    inner = run_dir / "work"
    inner.mkdir()
    result = await run_command(
        ["touch", "x"], workdir=inner, run_dir=run_dir, writable=False, network=False, timeout_s=30
    )
    assert result.exit_code != 0 and not (inner / "x").exists()


@pytest.mark.sandbox
@needs_bwrap
async def test_extra_hidden_paths_and_workdir_env_files_are_hidden(dirs: Dirs) -> None:
    private = dirs.outside / "private"
    private.mkdir()
    (private / "data").write_text("top secret")
    (dirs.workdir / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
    result = await _run(
        dirs, ["sh", "-c", f"cat {private}/data; cat .env; echo done"], hidden_paths=[private]
    )
    assert "top secret" not in result.output and KEY not in result.output
    assert "done" in result.output


@pytest.mark.sandbox
@needs_bwrap
async def test_no_network_unless_granted(dirs: Dirs, listener: int) -> None:
    denied = await _run(dirs, _connect_argv(listener), writable=False, network=False)
    assert denied.exit_code != 0 and "OK" not in denied.output
    # Control: the same connection works when the profile grants network.
    granted = await _run(dirs, _connect_argv(listener), writable=False, network=True)
    assert granted.exit_code == 0 and "OK" in granted.output


@pytest.mark.sandbox
@needs_bwrap
async def test_environment_is_rebuilt(dirs: Dirs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-123456789")
    monkeypatch.setenv("UNRELATED_SETTING", "parent-only")
    result = await _run(dirs, ["env"])
    assert result.exit_code == 0
    for leaked in ("OPENAI_API_KEY", KEY, "SOME_SERVICE_TOKEN", "UNRELATED_SETTING"):
        assert leaked not in result.output
    assert f"HOME={dirs.run_dir / 'home'}" in result.output
    assert f"TMPDIR={dirs.run_dir / 'tmp'}" in result.output


@pytest.mark.sandbox
@needs_bwrap
async def test_timeout_kills_the_whole_tree_quickly(dirs: Dirs) -> None:
    start = time.monotonic()
    result = await _run(dirs, ["sh", "-c", "sleep 30 & sleep 30"], timeout_s=0.5)
    assert result.timed_out and result.exit_code < 0
    assert time.monotonic() - start < min(stretched_by_load(WELL_BEFORE_30_S), 20)


@pytest.mark.sandbox
@needs_bwrap
async def test_output_is_capped_with_a_note(dirs: Dirs) -> None:
    argv = [sys.executable, "-c", "print('x' * 100_000); print('THE END')"]
    result = await _run(dirs, argv, output_cap=1_000)
    assert result.truncated and result.exit_code == 0
    assert "output truncated" in result.output and len(result.output) < 1_200
    assert "THE END" in result.output  # the tail is kept: that is where errors are


# --- without bubblewrap ---------------------------------------------------------------------


@pytest.fixture
def no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWARMDECK_SANDBOX", "off")


def test_fallback_is_reported(no_sandbox: None) -> None:
    info = detect_sandbox()
    assert not info.available and "SWARMDECK_SANDBOX=off" in info.reason


async def test_fallback_keeps_env_cwd_timeout_and_cap(
    dirs: Dirs, no_sandbox: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    env = await _run(dirs, ["env"])
    assert not env.sandboxed and env.exit_code == 0
    assert "OPENAI_API_KEY" not in env.output and KEY not in env.output
    pwd = await _run(dirs, ["pwd"])
    assert pwd.output.strip() == str(dirs.workdir.resolve())
    start = time.monotonic()
    slow = await _run(dirs, ["sleep", "30"], timeout_s=0.5)
    assert slow.timed_out and time.monotonic() - start < min(
        stretched_by_load(WELL_BEFORE_30_S), 20
    )
    big = await _run(dirs, [sys.executable, "-c", "print('y' * 100_000)"], output_cap=500)
    assert big.truncated and len(big.output) < 700


async def test_fallback_background_child_does_not_stall(dirs: Dirs, no_sandbox: None) -> None:
    start = time.monotonic()
    result = await _run(dirs, ["sh", "-c", "sleep 30 & echo started"], timeout_s=20)
    assert not result.timed_out and "started" in result.output
    assert time.monotonic() - start < min(stretched_by_load(WELL_BEFORE_30_S), 20)


async def test_missing_command(dirs: Dirs, no_sandbox: None) -> None:
    result = await _run(dirs, ["no-such-command-xyz"])
    assert result.exit_code == 127 and "command not found" in result.output


async def test_cancellation_kills_the_command(dirs: Dirs, no_sandbox: None) -> None:
    marker = dirs.workdir / "late"
    task = asyncio.create_task(_run(dirs, ["sh", "-c", f"sleep 1; touch {marker}"]))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(1.5)
    assert not marker.exists()


def test_build_env_allow_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_x")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:p@h/db")
    env = build_env(tmp_path / "run", {"GIT_AUTHOR_NAME": "worker"})
    assert "GITHUB_TOKEN" not in env and "DATABASE_URL" not in env
    assert env["LC_ALL"] == "C.UTF-8" and env["GIT_AUTHOR_NAME"] == "worker"
    for name in ("HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        assert Path(env[name]).is_dir() and env[name].startswith(str(tmp_path / "run"))
    assert oct(os.stat(env["HOME"]).st_mode & 0o777) == oct(0o700)
    with pytest.raises(PermissionDeniedError, match="names a secret"):
        build_env(tmp_path / "run", {"MY_API_KEY": "x"})
    with pytest.raises(PermissionDeniedError, match="holds a"):
        build_env(tmp_path / "run", {"HARMLESS": KEY})


def test_run_dir_layout_and_modes(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        run = RunDir.create(tmp_path / "runs", "20250101-abc")
    finally:
        os.umask(old)
    for path in (run.path, run.home, run.tmp):
        assert path.is_dir() and (path.stat().st_mode & 0o777) == 0o700
    assert RunDir.create(tmp_path / "runs", "20250101-abc") == run  # reopening is fine
    for bad in ("", "../x", "a/b", ".hidden", "x" * 200):
        with pytest.raises(UsageError):
            RunDir.create(tmp_path / "runs", bad)
