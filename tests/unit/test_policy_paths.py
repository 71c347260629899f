"""Issue 10, hole 2: read-only modes judge programs by real path, launchers strictly, and
never pass an environment assignment; git is told to run no program its config names."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swarmdeck.errors import PermissionDeniedError
from swarmdeck.tools.policy import check_argv, check_command, hardened, unwrap_chain

READ_ONLY = ["explore", "review", "test"]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    cat = shutil.which("cat")
    assert cat
    shutil.copy(cat, root / "cat")
    (root / "head").symlink_to(cat)  # a link named like an allowed command
    return root


@pytest.mark.parametrize("mode", READ_ONLY)
def test_installed_programs_pass(mode: str, work: Path) -> None:
    for argv in (["cat", "a"], ["/usr/bin/cat", "a"], ["timeout", "5", "cat", "a"], ["env"]):
        check_command(mode, argv, workdir=work)


@pytest.mark.parametrize("mode", READ_ONLY)
@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["./cat", "a"], "inside the workdir"),
        (["./head", "a"], "inside the workdir"),
        (["nice", "./cat"], "inside the workdir"),
        (["timeout", "5", "./cat"], "inside the workdir"),
        (["xargs", "./cat"], "inside the workdir"),
        (["env", "GIT_EXTERNAL_DIFF=./x", "git", "diff"], "makes a program run another"),
        (["env", "LD_PRELOAD=./x.so", "cat", "a"], "makes a program run another"),
        (["env", "FOO=1", "cat", "a"], "environment assignments are refused"),
        (["env", "--argv0=x", "cat", "a"], "cannot check"),
        (["timeout", "--weird", "5", "cat"], "cannot check"),
        (["python3", "-c", "print(1)"], "not on the read-only allow-list"),
        (["perl", "-e", "print 1"], "not on the read-only allow-list"),
    ],
)
def test_read_only_refusals_by_path(mode: str, argv: list[str], why: str, work: Path) -> None:
    with pytest.raises(PermissionDeniedError, match=why):
        check_command(mode, argv, workdir=work)


def test_a_copy_outside_trusted_dirs_is_not_the_command(tmp_path: Path, work: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    shutil.copy(work / "cat", other / "cat")
    with pytest.raises(PermissionDeniedError, match="resolves to"):
        check_command("explore", [str(other / "cat"), "a"], workdir=work)


def test_write_modes_keep_running_project_programs(work: Path) -> None:
    check_command("code", ["./cat", "a"], workdir=work)
    check_command("code", ["env", "CI=1", "./cat"], workdir=work)
    for argv in (["env", "LD_PRELOAD=x", "make"], ["sh", "-c", "export PAGER=./x; git log"]):
        with pytest.raises(PermissionDeniedError, match="run another"):
            check_argv("code", argv)


def test_unwrap_chain_names_every_level() -> None:
    chain = unwrap_chain("explore", ["nice", "-n", "3", "timeout", "5", "cat", "a"], strict=True)
    assert [level[0] for level in chain] == ["nice", "timeout", "cat"]


def test_git_runs_no_program_its_config_names(work: Path) -> None:
    argv = hardened("explore", ["git", "diff", "HEAD"], work)
    at = argv.index("diff")
    assert argv[at - 2 : at] == ["-c", "gpg.ssh.program=ssh-keygen"]
    assert {"core.fsmonitor=false", "core.hooksPath=/dev/null"} <= set(argv[1:at])
    assert argv[at:] == [
        "diff", "--no-ext-diff", "--no-textconv", "--ignore-submodules=dirty", "HEAD",
    ]  # fmt: skip
    assert hardened("review", ["git", "-C", "sub", "status"], work)[-4:] == [
        "-C", "sub", "status", "--ignore-submodules=dirty",
    ]  # fmt: skip
    assert hardened("code", ["git", "diff"], work) == ["git", "diff"]
