"""Issue 10, holes 1 and 3 and the processes: the sandbox fails closed, reads stay confined,
and nothing a tool starts outlives its call; under bubblewrap, Landlock, and none."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarmdeck.secrets import redact
from swarmdeck.secrets.redact import Redactor
from swarmdeck.secrets.store import CredentialStore
from swarmdeck.tools.base import READ_ONLY_MODES
from swarmdeck.tools.builtins.shell import SHELL_TOOL
from swarmdeck.tools.sandbox import SandboxInfo, _probe_bwrap, detect_sandbox, run_command
from swarmdeck.workspace.rundir import RunDir
from tests.integration.sandboxes import call, listener, sandbox_kind, tool_ctx

__all__ = ["listener", "sandbox_kind"]

KEY = "sk-sec10-" + "q7Zr" * 8
READ_ONLY = sorted(READ_ONLY_MODES)


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A swarmdeck home with a key and a provider file, a workdir, a file outside it."""
    home = tmp_path / "sd-home"
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    CredentialStore(home / "credentials").set("openai", KEY)
    (home / "providers").mkdir()
    (home / "providers" / "p.yaml").write_text("key: p\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("hello\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("OUTSIDE-CONTENT\n")
    run = RunDir.create(home / "runs", "run-1").path
    return {"home": home, "work": work, "run": run, "outside": outside, "tmp": tmp_path}


def _ctx(box: dict[str, Path], mode: str, **services: object):
    return tool_ctx(box["work"], box["run"], mode, **services)


# --- hole 1: fail closed ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", READ_ONLY)
async def test_read_only_modes_get_a_shell_only_inside_a_sandbox(
    sandbox_kind: str, box: dict[str, Path], mode: str
) -> None:
    assert SHELL_TOOL.offered_to(mode) is (sandbox_kind != "none")
    assert SHELL_TOOL.offered_to("code")  # offered; it refuses on its own (below)
    out = await call(SHELL_TOOL, _ctx(box, mode), argv=["cat", "a.txt"])
    if sandbox_kind == "none":
        assert out.permission_denied and "no shell in a read-only mode" in out.content
        assert "apt install bubblewrap" in out.content
    else:
        assert out.content == "exit_code: 0\nhello\n"


async def test_a_test_runner_neither_writes_nor_connects(
    sandbox_kind: str, box: dict[str, Path], listener: int
) -> None:
    """Test mode runs repo code: the sandbox, not the allow-list, is what stops it."""
    (box["work"] / "test_evil.py").write_text(
        "import socket\n\n"
        "def test_write():\n    open('written.txt', 'w').write('x')\n\n"
        "def test_connect():\n"
        f"    socket.create_connection(('127.0.0.1', {listener}), timeout=3).close()\n"
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_evil.py"]
    out = await call(SHELL_TOOL, _ctx(box, "test"), argv=argv, timeout_s=60)
    if sandbox_kind == "none":
        assert out.permission_denied and "no shell" in out.content
    else:
        assert "2 failed" in out.content, out.content
    assert not (box["work"] / "written.txt").exists()
    if sandbox_kind != "none":
        # Control: granted network, the same test connects (the sandbox made the refusal).
        granted = await call(
            SHELL_TOOL, _ctx(box, "test", network=True), argv=[*argv, "-k", "connect"]
        )
        assert "1 passed" in granted.content, granted.content


async def test_code_mode_refuses_the_shell_without_a_sandbox_unless_opted_in(
    sandbox_kind: str, box: dict[str, Path]
) -> None:
    out = await call(SHELL_TOOL, _ctx(box, "code"), argv=["touch", "made.txt"])
    if sandbox_kind == "none":
        assert out.permission_denied and "needs a sandbox" in out.content
        assert "apt install bubblewrap" in out.content and "--no-sandbox" in out.content
        assert not (box["work"] / "made.txt").exists()
        opted = await call(SHELL_TOOL, _ctx(box, "code", no_sandbox=True), argv=["touch", "m"])
        assert opted.content.startswith("exit_code: 0") and (box["work"] / "m").exists()
    else:
        assert out.content.startswith("exit_code: 0") and (box["work"] / "made.txt").exists()


async def test_code_shell_cannot_rewrite_the_provider_routing(
    sandbox_kind: str, box: dict[str, Path]
) -> None:
    target = box["home"] / "providers" / "p.yaml"
    script = f"echo 'base_url: http://evil' > {target}; cat {target}"
    out = await call(SHELL_TOOL, _ctx(box, "code"), argv=["sh", "-c", script])
    assert target.read_text() == "key: p\n"
    if sandbox_kind == "none":
        assert "needs a sandbox" in out.content
    else:
        assert "evil" not in out.content


async def test_encodings_of_the_key_file_never_come_back(
    sandbox_kind: str, box: dict[str, Path]
) -> None:
    """base64, od and rev of the credential file (through sh, past the argument check)."""
    key_file = box["home"] / "credentials" / "openai.key"
    ctx = _ctx(box, "code", no_sandbox=True)
    for tool in ("base64", "od -c", "rev", "xxd -p", "cat"):
        out = await call(SHELL_TOOL, ctx, argv=["sh", "-c", f"{tool} {key_file}"])
        text = out.content
        assert KEY not in text and base64.b64encode(KEY.encode()).decode()[:40] not in text
        assert KEY[::-1] not in text and KEY.encode().hex() not in text
        if sandbox_kind != "none":
            assert "exit_code: 0" not in text, text  # the file is not there, or not readable


def _pieces_of_the_key(text: str) -> list[str]:
    """Every 12-character piece of the key (or 24-digit piece of its hex) that `text` shows
    once whitespace is gone, and what xxd -r and base64 -d rebuild from it."""
    squeezed = "".join(text.split())
    hexed = KEY.encode().hex()
    rebuilt = [squeezed]
    for inverse in (["xxd", "-r"], ["xxd", "-r", "-p"], ["base64", "-di"]):
        done = subprocess.run(inverse, input=text.encode(), capture_output=True)
        rebuilt.append(done.stdout.decode("latin-1"))
    pieces = [KEY[i : i + 12] for i in range(len(KEY) - 11)]
    pieces += [hexed[i : i + 24] for i in range(0, len(hexed) - 23, 2)]
    return [piece for piece in pieces if any(piece in seen for seen in rebuilt)]


@pytest.mark.parametrize("tool", ["xxd", "xxd -p", "hexdump -C", "od -c", "base64 -w 20"])
async def test_a_dump_of_a_key_in_the_project_is_masked_line_by_line(
    sandbox_kind: str, box: dict[str, Path], tool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project that holds the key in a file of its own (a .env): the tools may read it,
    and what they print of it, spread over lines, is masked."""
    (box["work"] / "env.txt").write_text(f"OPENAI_API_KEY={KEY}\n")
    monkeypatch.setattr(redact, "_default", Redactor([KEY]))  # as load_redactor gives it
    ctx = _ctx(box, "code", no_sandbox=sandbox_kind == "none")
    out = await call(SHELL_TOOL, ctx, argv=["sh", "-c", f"{tool} env.txt"])
    assert out.content.startswith("exit_code: 0") and "[REDACTED]" in out.content, out.content
    assert _pieces_of_the_key(out.content) == []


_PARENT = """
import asyncio, json, sys
from pathlib import Path
from swarmdeck.tools.base import ToolContext
from swarmdeck.tools.builtins.shell import SHELL_TOOL

work, run, script = sys.argv[1:4]
ctx = ToolContext("s1", Path(work), "code", Path(run), services={"no_sandbox": True})
out = asyncio.run(SHELL_TOOL.call(ctx, json.dumps({"argv": ["sh", "-c", script]})))
print(out.content)
"""


def test_proc_environ_of_the_parent_holds_no_secret(
    sandbox_kind: str, box: dict[str, Path]
) -> None:
    """The worker was started with a secret in its environment (as a user who exported a
    key starts it): neither the tool's parent nor the worker shows it."""
    secret = "parent-only-" + "x1" * 10
    env = {**os.environ, "SWARMDECK_TEST_PARENT_SECRET": secret}
    scripts = ["cat /proc/$PPID/environ"]
    if sandbox_kind != "none":
        scripts.append("cat /proc/$PPID/environ; p=$(cut -d' ' -f4 /proc/$PPID/stat); "
                       "cat /proc/$p/environ")  # fmt: skip
    for script in scripts:
        out = subprocess.run(
            [sys.executable, "-c", _PARENT, str(box["work"]), str(box["run"]), script],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert secret not in out.stdout and "exit_code:" in out.stdout, out.stdout + out.stderr


# --- processes --------------------------------------------------------------------------------


@pytest.mark.parametrize("ends", ["returns", "times_out"])
async def test_a_daemon_forked_by_a_tool_is_dead_when_the_call_returns(
    sandbox_kind: str, box: dict[str, Path], ends: str
) -> None:
    marker = box["work"] / "late.txt"
    pid_file = box["work"] / "daemon.pid"
    daemon = f"echo $$ > {pid_file}; sleep 1.5; touch {marker}"
    tail = "echo started" if ends == "returns" else "sleep 30"
    script = f"setsid sh -c '{daemon}' > /dev/null 2>&1 & {tail}"
    result = await run_command(
        ["sh", "-c", script],
        workdir=box["work"],
        run_dir=box["run"],
        writable=True,
        network=False,
        timeout_s=0.7 if ends == "times_out" else 20,
        sandbox=detect_sandbox(),
    )
    assert result.timed_out is (ends == "times_out")
    # The daemon may have been killed before it wrote its pid, or between the shell's
    # opening the file and writing to it (a suite run read it empty); if it wrote it, it is
    # gone now. Either way the marker below says whether it outlived the call.
    written = pid_file.read_text().strip() if pid_file.exists() else ""
    if written and sandbox_kind != "bwrap":  # bwrap's pids are the namespace's
        pid = int(written)
        assert not Path(f"/proc/{pid}").exists() or _is_zombie(pid)
    await asyncio.sleep(2.0)
    assert not marker.exists(), "a daemon outlived its tool call"


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# --- hole 3: reads confined -------------------------------------------------------------------


async def test_reads_are_confined_to_what_tools_need(
    sandbox_kind: str, box: dict[str, Path]
) -> None:
    if sandbox_kind == "none":
        pytest.skip("without a sandbox read-only modes have no shell (tested above)")
    other = box["tmp"] / "other-home"
    CredentialStore(other / "credentials").set("glm", KEY)
    secret_files = [other / "credentials" / "glm.key", box["outside"], Path("/etc/shadow")]
    for mode in ("explore", "code"):
        for path in secret_files:
            out = await call(SHELL_TOOL, _ctx(box, mode), argv=["sh", "-c", f"cat {path}"])
            if mode == "explore":
                out = await call(SHELL_TOOL, _ctx(box, mode), argv=["cat", str(path)])
            assert "exit_code: 0" not in out.content, (mode, path, out.content)
            assert KEY not in out.content and "OUTSIDE-CONTENT" not in out.content
    listing = await call(SHELL_TOOL, _ctx(box, "explore"), argv=["ls", "-A", "/root", "/home"])
    for name in os.listdir(Path.home()):
        if name not in (".pyenv",):  # the interpreter may live there: it is shown, alone
            assert f"\n{name}\n" not in f"\n{listing.content}\n", listing.content


def test_detection_falls_back_when_bwrap_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PATH without bwrap: Landlock where the kernel has it, else none; never a silent
    shell without protection."""
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    monkeypatch.delenv("SWARMDECK_SANDBOX", raising=False)
    _probe_bwrap.cache_clear()
    try:
        info = detect_sandbox()
        assert info.kind in ("landlock", "none")
        assert "bwrap (bubblewrap) is not installed" in info.reason or info.kind == "landlock"
        monkeypatch.setenv("SWARMDECK_SANDBOX", "off")
        assert detect_sandbox() == SandboxInfo("none", "disabled by SWARMDECK_SANDBOX=off")
        monkeypatch.setenv("SWARMDECK_SANDBOX", "bwrap")
        assert detect_sandbox().kind == "none"
    finally:
        _probe_bwrap.cache_clear()
    assert shutil.which("bwrap") is None
