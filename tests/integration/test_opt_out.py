"""Issue 30 item 2: what opting out of the sandbox lifts and what stays, as the warning,
`status` and the README say it, each fact checked against a real command."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.secrets.store import CredentialStore
from swarmdeck.tools.builtins.shell import SHELL_TOOL
from swarmdeck.tools.sandbox import OPT_OUT_KEEPS, OPT_OUT_LIFTS, home_shield
from swarmdeck.tools.sandbox_info import OPTED_OUT_REASON, sandbox_warning
from swarmdeck.workspace.rundir import RunDir
from tests.conftest import run_cli
from tests.integration.sandboxes import call, listener, tool_ctx

__all__ = ["listener"]

KEY = "sk-optout-" + "Zu8w" * 8


def test_the_warning_and_status_say_what_stays(sd_home: Path) -> None:
    """The old warning said commands run unconfined; they never had the network."""
    warning = sandbox_warning(False, OPTED_OUT_REASON, True)
    assert "unconfined" not in warning
    assert OPT_OUT_LIFTS in warning and OPT_OUT_KEEPS in warning
    for fact in ("outside the workdir", "no network", "swarmdeck's home", "no secret"):
        assert fact in warning
    (sd_home / "settings.yaml").write_text("sandbox: off\n")
    status = run_cli(sd_home, "status", "--json")
    assert status.code == 0, status.stderr
    shown = run_cli(sd_home, "status", COLUMNS="400")
    assert "no network unless the provider profile grants it" in " ".join(shown.stdout.split())


async def test_each_fact_holds_for_an_opted_out_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listener: int
) -> None:
    if home_shield() is None:
        pytest.skip("nothing here can hide the home: the shell refuses (test_leaks.py)")
    home = tmp_path / "sd-home"
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    monkeypatch.setenv("SWARMDECK_TEST_SECRET_TOKEN", KEY)
    CredentialStore(home / "credentials").set("openai", KEY)
    work = tmp_path / "work"
    work.mkdir()
    ctx = tool_ctx(work, RunDir.create(home / "runs", "r").path, "code", no_sandbox=True)
    # (Under Landlock a directory that holds the home takes no new entry: one beside it.)
    (tmp_path / "elsewhere").mkdir()
    outside = tmp_path / "elsewhere" / "outside.txt"
    # Lifted: a write outside the workdir.
    wrote = await call(SHELL_TOOL, ctx, argv=["sh", "-c", f"echo made > {outside}"])
    assert wrote.content.startswith("exit_code: 0") and outside.read_text() == "made\n"
    # Kept: no network, no secret in the environment, no home.
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=3)"
    net = await call(SHELL_TOOL, ctx, argv=["python3", "-c", connect])
    assert not net.content.startswith("exit_code: 0"), net.content
    assert "unreachable" in net.content or "denied" in net.content, net.content
    env = await call(SHELL_TOOL, ctx, argv=["env"])
    assert "SWARMDECK_TEST_SECRET_TOKEN" not in env.content and KEY not in env.content
    ls = await call(SHELL_TOOL, ctx, argv=["ls", "-A", str(home / "credentials")])
    assert "openai.key" not in ls.content, ls.content
    granted = tool_ctx(work, ctx.run_dir, "code", no_sandbox=True, network=True)
    online = await call(SHELL_TOOL, granted, argv=["python3", "-c", connect])
    assert online.content.startswith("exit_code: 0"), online.content
