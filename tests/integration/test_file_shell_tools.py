"""File and shell tools through the tool protocol, including the escape attempts."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.errors import PermissionDeniedError
from swarmdeck.secrets.redact import Redactor, default_redactor, set_default_redactor
from swarmdeck.secrets.store import CredentialStore
from swarmdeck.tools.base import Effect, ToolContext, ToolOutcome
from swarmdeck.tools.builtins.files import (
    FILE_TOOLS,
    GREP,
    LIST_DIR,
    READ_FILE,
    WRITE_FILE,
    WriteFileArgs,
)
from swarmdeck.tools.builtins.shell import SHELL_TOOL
from swarmdeck.tools.sandbox import detect_sandbox
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


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A workdir with a few files, a run dir, and a credentials dir holding one key."""
    home = tmp_path / "sd-home"
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    store = CredentialStore(home / "credentials")
    store.set("openai", KEY)
    wd = tmp_path / "work"
    (wd / "src").mkdir(parents=True)
    (wd / "src" / "app.py").write_text("def main():\n    return 42\n\n# TODO: more\n")
    (wd / "notes.md").write_text("# Notes\nTODO: write docs\n")
    (wd / "blob.bin").write_bytes(b"\x00\x01TODO\x02")
    (wd / ".git").mkdir()
    (wd / ".git" / "config").write_text("TODO in git\n")
    (tmp_path / "outside.txt").write_text("outside content\n")
    run = RunDir.create(home / "runs", "run-1")
    return {"workdir": wd, "run_dir": run.path, "creds": store.directory, "tmp": tmp_path}


@pytest.fixture
def redactor() -> Iterator[Redactor]:
    before = default_redactor()
    mine = Redactor([KEY])
    set_default_redactor(mine)
    yield mine
    set_default_redactor(before)


def _ctx(env: dict[str, Path], mode: str, **services: Any) -> ToolContext:
    return ToolContext(
        session_id="s1",
        workdir=env["workdir"],
        mode=mode,
        run_dir=env["run_dir"],
        services=dict(services),
    )


async def _call(tool: Any, ctx: ToolContext, **args: Any) -> ToolOutcome:
    return await tool.call(ctx, json.dumps(args))


def _denied(outcome: ToolOutcome, reason: str) -> None:
    assert outcome.is_error and outcome.permission_denied, outcome
    assert reason in outcome.content, outcome.content


# --- the file tools -------------------------------------------------------------------------


def test_effects_and_modes() -> None:
    assert [t.name for t in FILE_TOOLS] == ["read_file", "list_dir", "grep", "write_file"]
    assert {READ_FILE.effect, LIST_DIR.effect, GREP.effect} == {Effect.READ}
    assert WRITE_FILE.effect is Effect.IDEMPOTENT
    assert WRITE_FILE.modes == frozenset({"code", "resume", "agent"})
    assert SHELL_TOOL.effect is Effect.ONCE and "explore" in SHELL_TOOL.modes
    assert SHELL_TOOL.spec().parameters["properties"]["argv"]["type"] == "array"


async def test_read_file_numbers_lines_and_pages(env: dict[str, Path]) -> None:
    ctx = _ctx(env, "explore")
    out = await _call(READ_FILE, ctx, path="src/app.py")
    assert not out.is_error
    assert out.content.splitlines()[:2] == ["     1\tdef main():", "     2\t    return 42"]
    page = await _call(READ_FILE, ctx, path="src/app.py", offset=2, limit=1)
    assert page.content == "     2\t    return 42\n(more lines follow; continue with offset=3)"


async def test_read_file_refuses_binary_dirs_and_missing(env: dict[str, Path]) -> None:
    ctx = _ctx(env, "explore")
    assert "binary file" in (await _call(READ_FILE, ctx, path="blob.bin")).content
    assert "is a directory" in (await _call(READ_FILE, ctx, path="src")).content
    assert "no such file" in (await _call(READ_FILE, ctx, path="nope.txt")).content


async def test_read_file_redacts_secrets(env: dict[str, Path], redactor: Redactor) -> None:
    (env["workdir"] / "config.py").write_text(f'OPENAI = "{KEY}"\n')
    out = await _call(READ_FILE, _ctx(env, "explore"), path="config.py")
    assert KEY not in out.content and "[REDACTED]" in out.content


async def test_list_dir(env: dict[str, Path]) -> None:
    out = await _call(LIST_DIR, _ctx(env, "review"))
    assert out.content.splitlines() == [".git/", "blob.bin", "notes.md", "src/"]


async def test_grep_finds_matches_and_skips_git_binary_and_credentials(
    env: dict[str, Path],
) -> None:
    (env["workdir"] / ".env").write_text("TODO=secret\n")
    out = await _call(GREP, _ctx(env, "explore"), pattern="TODO")
    assert out.content.splitlines() == [
        "notes.md:2: TODO: write docs",
        "src/app.py:4: # TODO: more",
    ]
    only_py = await _call(GREP, _ctx(env, "explore"), pattern="TODO", glob="*.py")
    assert only_py.content == "src/app.py:4: # TODO: more"
    bad = await _call(GREP, _ctx(env, "explore"), pattern="(unclosed")
    assert bad.is_error and "invalid regular expression" in bad.content


async def test_grep_caps_results(env: dict[str, Path]) -> None:
    (env["workdir"] / "many.txt").write_text("hit\n" * 500)
    out = await _call(GREP, _ctx(env, "explore"), pattern="hit")
    lines = out.content.splitlines()
    assert len(lines) == 201 and lines[-1] == "(stopped at 200 matches)"


async def test_write_file_creates_parents_and_is_idempotent(env: dict[str, Path]) -> None:
    ctx = _ctx(env, "code")
    first = await _call(WRITE_FILE, ctx, path="pkg/new/mod.py", content="x = 1\n")
    again = await _call(WRITE_FILE, ctx, path="pkg/new/mod.py", content="x = 1\n")
    assert not first.is_error and first == again
    assert (env["workdir"] / "pkg" / "new" / "mod.py").read_text() == "x = 1\n"


async def test_write_file_keeps_the_mode_of_the_file_it_replaces(env: dict[str, Path]) -> None:
    script = env["workdir"] / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    await _call(WRITE_FILE, _ctx(env, "code"), path="run.sh", content="#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert script.read_text().endswith("echo hi\n")


# --- escapes through the file tools ---------------------------------------------------------


@pytest.mark.parametrize("mode", ["explore", "review", "test"])
async def test_write_file_refused_in_read_only_modes(env: dict[str, Path], mode: str) -> None:
    out = await _call(WRITE_FILE, _ctx(env, mode), path="x.txt", content="no")
    _denied(out, "not available in")
    # The body refuses on its own too, if something calls it without Tool.call.
    with pytest.raises(PermissionDeniedError, match="not allowed in"):
        await WRITE_FILE.body(_ctx(env, mode), WriteFileArgs(path="x.txt", content="no"))
    assert not (env["workdir"] / "x.txt").exists()


async def test_write_outside_the_workdir_is_refused(env: dict[str, Path]) -> None:
    ctx = _ctx(env, "code")
    escaped = env["tmp"] / "escaped.txt"
    _denied(await _call(WRITE_FILE, ctx, path="../escaped.txt", content="x"), "escapes")
    _denied(await _call(WRITE_FILE, ctx, path=str(escaped), content="x"), "escapes")
    assert not escaped.exists()


async def test_dotdot_read_is_refused(env: dict[str, Path]) -> None:
    out = await _call(READ_FILE, _ctx(env, "explore"), path="../outside.txt")
    _denied(out, "path escapes the workdir: ../outside.txt")
    _denied(await _call(LIST_DIR, _ctx(env, "explore"), path=".."), "escapes")
    _denied(await _call(GREP, _ctx(env, "explore"), pattern="x", path=".."), "escapes")


async def test_symlink_out_is_refused_for_read_and_write(env: dict[str, Path]) -> None:
    target = env["tmp"] / "outside.txt"
    (env["workdir"] / "link.txt").symlink_to(target)
    (env["workdir"] / "out").symlink_to(env["tmp"])
    read = await _call(READ_FILE, _ctx(env, "explore"), path="link.txt")
    _denied(read, "through a symlink")
    write = await _call(WRITE_FILE, _ctx(env, "code"), path="link.txt", content="pwned")
    _denied(write, "through a symlink")
    write2 = await _call(WRITE_FILE, _ctx(env, "code"), path="out/new.txt", content="pwned")
    _denied(write2, "through a symlink")
    assert target.read_text() == "outside content\n" and not (env["tmp"] / "new.txt").exists()
    # grep does not follow the link either.
    out = await _call(GREP, _ctx(env, "explore"), pattern="outside content")
    assert out.content == "(no matches)"


async def test_credential_files_are_refused(env: dict[str, Path]) -> None:
    ctx = _ctx(env, "code")
    (env["workdir"] / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
    _denied(await _call(READ_FILE, ctx, path=".env"), "credential file: .env")
    _denied(await _call(WRITE_FILE, ctx, path=".env", content="x"), "credential file: .env")
    key_file = env["creds"] / "openai.key"
    _denied(await _call(READ_FILE, ctx, path=str(key_file)), "escapes")


async def test_credentials_dir_inside_the_workdir_is_refused(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = env["workdir"] / ".sd"
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    CredentialStore(home / "credentials").set("glm", KEY)
    out = await _call(READ_FILE, _ctx(env, "code"), path=".sd/credentials/glm.key")
    _denied(out, "swarmdeck credentials directory")
    listing = await _call(LIST_DIR, _ctx(env, "code"), path=".sd/credentials")
    _denied(listing, "swarmdeck credentials directory")


# --- the shell tool -------------------------------------------------------------------------


async def test_shell_runs_and_reports_the_exit_code(env: dict[str, Path]) -> None:
    out = await _call(SHELL_TOOL, _ctx(env, "explore"), argv=["cat", "notes.md"])
    assert out.content == "exit_code: 0\n# Notes\nTODO: write docs\n"
    failed = await _call(SHELL_TOOL, _ctx(env, "code"), argv=["sh", "-c", "echo no; exit 3"])
    assert failed.content == "exit_code: 3\nno\n"


@pytest.mark.parametrize("mode", ["explore", "review", "test"])
async def test_shell_cannot_write_in_read_only_modes(env: dict[str, Path], mode: str) -> None:
    ctx = _ctx(env, mode)
    _denied(await _call(SHELL_TOOL, ctx, argv=["touch", "x"]), "not on the read-only allow-list")
    _denied(await _call(SHELL_TOOL, ctx, argv=["touch", "/tmp/x"]), "not on the read-only")
    _denied(await _call(SHELL_TOOL, ctx, argv=["bash", "-c", "echo > x"]), "shell interpreters")
    _denied(await _call(SHELL_TOOL, ctx, argv=["find", ".", "-delete"]), "writes files")
    assert not (env["workdir"] / "x").exists()


@pytest.mark.sandbox
@needs_bwrap
async def test_test_runner_cannot_write_the_workdir(env: dict[str, Path]) -> None:
    """Test mode runs repo code; the read-only bind is what stops it writing."""
    (env["workdir"] / "test_w.py").write_text(
        "def test_write():\n    open('written.txt', 'w').write('x')\n"
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_w.py"]
    out = await _call(SHELL_TOOL, _ctx(env, "test"), argv=argv, timeout_s=60)
    assert "Read-only file system" in out.content and "1 failed" in out.content
    assert not (env["workdir"] / "written.txt").exists()


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        yield srv.getsockname()[1]


async def test_network_refused_in_read_only_modes_by_policy(
    env: dict[str, Path], listener: int
) -> None:
    code = f"import socket; socket.create_connection(('127.0.0.1', {listener}))"
    for mode in ("explore", "review"):
        out = await _call(SHELL_TOOL, _ctx(env, mode), argv=["python3", "-c", code])
        _denied(out, "not on the read-only allow-list")
    out = await _call(SHELL_TOOL, _ctx(env, "code"), argv=["curl", f"http://127.0.0.1:{listener}"])
    _denied(out, "network")


@pytest.mark.sandbox
@needs_bwrap
async def test_network_blocked_by_the_sandbox_in_test_mode(
    env: dict[str, Path], listener: int
) -> None:
    (env["workdir"] / "test_net.py").write_text(
        "import socket\n\n"
        "def test_connect():\n"
        f"    socket.create_connection(('127.0.0.1', {listener}), timeout=3).close()\n"
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_net.py"]
    blocked = await _call(SHELL_TOOL, _ctx(env, "test"), argv=argv, timeout_s=60)
    assert "1 failed" in blocked.content, blocked.content
    # Control: with network granted, the same test connects.
    granted = await _call(SHELL_TOOL, _ctx(env, "test", network=True), argv=argv, timeout_s=60)
    assert "1 passed" in granted.content, granted.content


async def test_shell_refuses_credential_arguments(env: dict[str, Path]) -> None:
    (env["workdir"] / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
    for mode in ("explore", "code"):
        out = await _call(SHELL_TOOL, _ctx(env, mode), argv=["cat", ".env"])
        _denied(out, "credential file: .env")
        key = str(env["creds"] / "openai.key")
        _denied(await _call(SHELL_TOOL, _ctx(env, mode), argv=["cat", key]), "credentials")


@pytest.mark.sandbox
@needs_bwrap
async def test_credentials_invisible_to_a_program_in_the_sandbox(env: dict[str, Path]) -> None:
    """A program the argv check cannot see through still finds no credentials dir."""
    key = env["creds"] / "openai.key"
    code = f"print(open({str(key)!r}).read())"
    out = await _call(SHELL_TOOL, _ctx(env, "code"), argv=[sys.executable, "-c", code])
    assert "FileNotFoundError" in out.content and KEY not in out.content


async def test_shell_environment_has_no_keys(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789abcdefghij")
    for mode in ("explore", "code"):
        out = await _call(SHELL_TOOL, _ctx(env, mode), argv=["env"])
        assert out.content.startswith("exit_code: 0\n")
        assert "OPENAI_API_KEY" not in out.content and "ANTHROPIC_API_KEY" not in out.content
        assert KEY not in out.content


async def test_shell_output_is_redacted(env: dict[str, Path], redactor: Redactor) -> None:
    out = await _call(SHELL_TOOL, _ctx(env, "code"), argv=["echo", f"key={KEY}"])
    assert KEY not in out.content and "[REDACTED]" in out.content


async def test_shell_timeout_kills_quickly(env: dict[str, Path]) -> None:
    start = time.monotonic()
    out = await _call(SHELL_TOOL, _ctx(env, "code"), argv=["sleep", "30"], timeout_s=0.5)
    assert time.monotonic() - start < min(stretched_by_load(WELL_BEFORE_30_S), 20)
    assert out.content.endswith("(timed out after 0.5s)")


async def test_shell_output_cap(env: dict[str, Path]) -> None:
    argv = [sys.executable, "-c", "print('z' * 200_000)"]
    out = await _call(SHELL_TOOL, _ctx(env, "code"), argv=argv)
    assert "output truncated" in out.content and len(out.content) < 51_000


async def test_shell_argument_validation(env: dict[str, Path]) -> None:
    out = await _call(SHELL_TOOL, _ctx(env, "code"), argv="ls -la")
    assert out.is_error and "invalid arguments: argv" in out.content
    out = await _call(SHELL_TOOL, _ctx(env, "code"), argv=[])
    assert out.is_error


async def test_fallback_without_sandbox_still_holds_the_policy(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARMDECK_SANDBOX", "off")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    # Since issue 10 the fallback fails closed: no shell in a read-only mode, and a write
    # mode's shell only for a user who opted out of the sandbox.
    _denied(await _call(SHELL_TOOL, _ctx(env, "explore"), argv=["touch", "x"]), "read-only mode")
    _denied(await _call(SHELL_TOOL, _ctx(env, "code"), argv=["pwd"]), "needs a sandbox")
    opted = _ctx(env, "code", no_sandbox=True)
    envs = await _call(SHELL_TOOL, opted, argv=["env"])
    assert "OPENAI_API_KEY" not in envs.content
    pwd = await _call(SHELL_TOOL, opted, argv=["pwd"])
    assert pwd.content == f"exit_code: 0\n{env['workdir'].resolve()}\n"
    _denied(await _call(SHELL_TOOL, opted, argv=["sudo", "id"]), "privilege")
    assert not (env["workdir"] / "x").exists()
    assert os.environ["SWARMDECK_SANDBOX"] == "off"
