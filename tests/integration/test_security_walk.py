"""Issue 10, hole 2 and the walk: every tool in every mode against the escape shapes
(`./prog`, an absolute path, `env VAR=...`, launchers, interpreters with -c, hard links,
symlinks, /proc/*/environ), under bubblewrap, Landlock and none.

An escape is any of: the outside secret or the worker's secret variable in a tool's
answer, or the marker a planted program writes outside the workdir."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.tools.base import ALL_MODES, READ_ONLY_MODES, WRITE_MODES
from swarmdeck.tools.builtins.files import GREP, LIST_DIR, READ_FILE, WRITE_FILE
from swarmdeck.tools.builtins.shell import SHELL_TOOL
from swarmdeck.workspace.rundir import RunDir
from tests.integration.sandboxes import call, sandbox_kind, tool_ctx

__all__ = ["sandbox_kind"]

OUTSIDE_SECRET = "OUTSIDE-SECRET-7f3a"
ENV_SECRET = "WORKER-ENV-SECRET-91c2"
PLANTED = "PLANTED-PROGRAM-RAN"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A workdir with a planted program, links out, and a secret file outside it."""
    home = tmp_path / "sd-home"
    monkeypatch.setenv("SWARMDECK_HOME", str(home))
    monkeypatch.setenv("SWARMDECK_WALK_SECRET", ENV_SECRET)
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text(OUTSIDE_SECRET + "\n")
    marker = outside / "marker"
    prog = work / "cat"  # named like an allowed command
    prog.write_text(f"#!/bin/sh\necho {PLANTED}\n/usr/bin/touch {marker}\n/bin/cat {secret}\n")
    prog.chmod(0o755)
    other = outside / "bin"
    other.mkdir()
    (other / "cat").write_bytes(prog.read_bytes())
    (other / "cat").chmod(0o755)
    (work / "lib.so").write_text("not a library")
    (work / "link-out").symlink_to(secret)
    (work / "dir-out").symlink_to(outside)
    (work / "sys-cat").symlink_to("/usr/bin/cat")
    (work / "a.txt").write_text("hello\n")
    os.link(secret, work / "hard")  # as a shell without a sandbox could have made it
    run = RunDir.create(home / "runs", "walk").path
    return {"work": work, "run": run, "secret": secret, "marker": marker, "bin": other}


def _shell_shapes(w: dict[str, Path]) -> list[list[str]]:
    secret, planted = str(w["secret"]), str(w["bin"] / "cat")
    pid = os.getpid()
    return [
        ["./cat", "a.txt"],
        [planted, "a.txt"],
        ["sys-cat", secret],
        ["./sys-cat", secret],
        ["env", "./cat"],
        ["env", f"PATH={w['bin']}", "cat", "a.txt"],
        ["env", "GIT_EXTERNAL_DIFF=./cat", "git", "diff", "--no-index", "a.txt", "hard"],
        ["env", "LD_PRELOAD=./lib.so", "cat", "a.txt"],
        ["env", "-S", "./cat a.txt"],
        ["nice", "./cat"],
        ["nice", "-n", "5", planted],
        ["timeout", "5", "./cat"],
        ["timeout", "--kill-after", "1", "5", planted],
        ["nohup", "./cat"],
        ["stdbuf", "-o0", "./cat"],
        ["xargs", "-a", "a.txt", "./cat"],
        ["xargs", "./cat"],
        ["sh", "-c", "./cat"],
        ["bash", "-c", f"cat {secret}"],
        [sys.executable, "-c", f"print(open({secret!r}).read())"],
        ["python3", "-c", "import os; print(os.environ)"],
        ["perl", "-e", f"print `cat {secret}`"],
        ["git", "-c", "core.pager=./cat", "log"],
        ["cat", "link-out"],
        ["cat", "dir-out/secret.txt"],
        ["cat", secret],
        ["cat", f"/proc/{pid}/environ"],
        ["cat", "/proc/self/environ"],
        ["sh", "-c", "cat /proc/$PPID/environ"],
        ["grep", "-r", "SECRET", "/proc/1/environ", str(w["secret"].parent)],
        ["sh", "-c", f"ln {secret} made-link; cat made-link"],
    ]


def _file_shapes(w: dict[str, Path]) -> list[tuple[Any, dict[str, Any]]]:
    pid = os.getpid()
    return [
        (READ_FILE, {"path": "hard"}),
        (READ_FILE, {"path": "link-out"}),
        (READ_FILE, {"path": "dir-out/secret.txt"}),
        (READ_FILE, {"path": str(w["secret"])}),
        (READ_FILE, {"path": "../outside/secret.txt"}),
        (READ_FILE, {"path": f"/proc/{pid}/environ"}),
        (READ_FILE, {"path": "/proc/self/environ"}),
        (GREP, {"pattern": "SECRET"}),
        (GREP, {"pattern": "SECRET", "path": "hard"}),
        (GREP, {"pattern": "SECRET", "path": "dir-out"}),
        (LIST_DIR, {"path": "dir-out"}),
        (WRITE_FILE, {"path": "link-out", "content": "overwritten"}),
        (WRITE_FILE, {"path": "dir-out/new.txt", "content": "x"}),
        (WRITE_FILE, {"path": "hard", "content": "overwritten"}),
    ]


def _services(kind: str, mode: str) -> dict[str, Any]:
    # A write mode without a sandbox runs only for a user who opted out: walk that too.
    return {"no_sandbox": True} if kind == "none" and mode in WRITE_MODES else {}


def _escaped(text: str, w: dict[str, Path]) -> list[str]:
    found = [s for s in (OUTSIDE_SECRET, ENV_SECRET) if s in text]
    if w["marker"].exists():
        found.append("marker written outside the workdir")
    if w["secret"].read_text() != OUTSIDE_SECRET + "\n":
        found.append("outside file changed")
    return found


@pytest.mark.parametrize("mode", sorted(ALL_MODES))
async def test_walk_every_tool_every_mode_every_shape(
    sandbox_kind: str, world: dict[str, Path], mode: str
) -> None:
    ctx = tool_ctx(world["work"], world["run"], mode, **_services(sandbox_kind, mode))
    confined = sandbox_kind != "none"
    problems: list[str] = []
    for argv in _shell_shapes(world):
        out = await call(SHELL_TOOL, ctx, argv=argv, timeout_s=20)
        ran = out.content.startswith("exit_code:")
        if mode in READ_ONLY_MODES and PLANTED in out.content:
            problems.append(f"planted program ran: {argv}")
        # Without a sandbox a write mode is unconfined by the user's choice: only the
        # secrets that policy and redaction still guard count there.
        leaks = _escaped(out.content, world) if confined or mode in READ_ONLY_MODES else []
        if not confined and mode in WRITE_MODES and ENV_SECRET in out.content:
            leaks.append("worker environment")
        if mode in READ_ONLY_MODES and ran and argv[0] not in ("cat", "grep", "git"):
            problems.append(f"read-only mode ran {argv}: {out.content[:120]}")
        problems += [f"{argv}: {leak}" for leak in leaks]
        world["marker"].unlink(missing_ok=True)
    for tool, args in _file_shapes(world):
        out = await call(tool, ctx, **args)
        problems += [f"{tool.name} {args}: {leak}" for leak in _escaped(out.content, world)]
    # write_file replaces a link, never writes through it.
    assert stat.S_ISREG(os.lstat(world["secret"]).st_mode)
    assert problems == []


async def test_file_tools_refuse_a_hard_link_and_say_why(world: dict[str, Path]) -> None:
    ctx = tool_ctx(world["work"], world["run"], "explore")
    out = await call(READ_FILE, ctx, path="hard")
    assert out.permission_denied and "has 2 hard links" in out.content
    assert "any file on the same disk" in out.content
    grep = await call(GREP, ctx, pattern="SECRET")
    assert OUTSIDE_SECRET not in grep.content and "several hard links: hard" in grep.content
    assert (await call(READ_FILE, ctx, path="a.txt")).content == "     1\thello"
