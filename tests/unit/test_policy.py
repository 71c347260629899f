"""The per-mode shell policy."""

from __future__ import annotations

import pytest

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.tools.policy import check_argv

READ_ONLY = ["explore", "review", "test"]
WRITE = ["code", "resume", "agent"]


@pytest.mark.parametrize("mode", READ_ONLY)
@pytest.mark.parametrize(
    "argv",
    [
        ["ls", "-la"],
        ["cat", "README.md"],
        ["head", "-n", "5", "a.py"],
        ["grep", "-rn", "TODO", "src"],
        ["rg", "-n", "def ", "src"],
        ["find", ".", "-name", "*.py"],
        ["git", "log", "--oneline", "-5"],
        ["git", "-C", "sub", "diff", "HEAD~1"],
        ["git", "status"],
        ["git", "blame", "a.py"],
        ["git", "branch", "-a"],
        ["git", "status", "--ignore-submodules"],
        ["git", "diff", "--ignore-submodules=all", "--submodule=short"],
        ["sed", "-n", "1,20p", "a.py"],
        ["sed", "-n", "-e", "5p;10q", "a.py"],
        ["/usr/bin/wc", "-l", "a.py"],
        ["env"],
        ["env", "-i", "sort", "a.txt"],
        ["timeout", "5", "cat", "a.py"],
        ["stat", "a.py"],
        ["tree", "-L", "2"],
        ["pwd"],
        ["echo", "hi"],
    ],
)
def test_read_only_allow_list(mode: str, argv: list[str]) -> None:
    check_argv(mode, argv)


@pytest.mark.parametrize("mode", READ_ONLY)
@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["touch", "x"], "not on the read-only allow-list"),
        (["rm", "a.py"], "not on the read-only allow-list"),
        (["python3", "-c", "print(1)"], "not on the read-only allow-list"),
        (["awk", "{print}", "a"], "not on the read-only allow-list"),
        (["bash", "-c", "ls"], "shell interpreters are refused"),
        (["sh", "-c", "cat a"], "shell interpreters are refused"),
        (["env", "bash", "-c", "ls"], "shell interpreters are refused"),
        (["find", ".", "-delete"], "writes files or runs commands"),
        (["find", ".", "-exec", "rm", "{}", ";"], "writes files or runs commands"),
        (["sed", "-i", "s/a/b/", "a.py"], "only printing"),
        (["sed", "s/a/b/", "a.py"], "only printing"),
        (["sed", "-n", "w out.txt", "a.py"], "only p, =, l, q"),
        (["sed", "-n", "1e id", "a.py"], "only p, =, l, q"),
        (["git", "commit", "-m", "x"], "not a read-only git command"),
        (["git", "push"], "not a read-only git command"),
        (["git", "-c", "core.pager=sh", "log"], "arbitrary programs"),
        (["git", "diff", "--output=x"], "writes files or runs commands"),
        (["git", "branch", "new-branch"], "only listing"),
        # After the --ignore-submodules=dirty that read-only git gets, the last one wins.
        (["git", "status", "--ignore-submodules=none"], "runs git in submodules"),
        (["git", "diff", "--ignore-submodules=untracked"], "runs git in submodules"),
        (["git", "diff", "--submodule=diff"], "runs git in submodules"),
        (["git", "log", "-p", "--submodule"], "runs git in submodules"),
        (["git", "grep", "--recurse-submodules", "x"], "runs git in submodules"),
        (["git", "ls-files", "--recurse-submodules"], "runs git in submodules"),
        (["sort", "-o", "out", "a"], "writes files or runs commands"),
        (["sort", "-uo", "out", "a"], "writes files or runs commands"),
        (["rg", "--pre", "sh", "x"], "writes files or runs commands"),
        (["curl", "http://example.com"], "not on the read-only allow-list"),
        (["env", "-S", "rm -rf x"], "cannot be checked"),
        # Since issue 10: no assignment passes in a read-only mode (it was allowed before).
        (["env", "LC_ALL=C", "sort", "a.txt"], "environment assignments are refused"),
    ],
)
def test_read_only_refusals(mode: str, argv: list[str], why: str) -> None:
    with pytest.raises(PermissionDeniedError, match=why) as err:
        check_argv(mode, argv)
    assert f"{mode} mode" in err.value.message


@pytest.mark.parametrize(
    "argv",
    [
        ["pytest", "-q", "tests"],
        ["python", "-m", "pytest", "-x"],
        ["python3.11", "-B", "-m", "pytest"],
        ["/work/.venv/bin/python", "-m", "unittest", "discover"],
        ["npm", "test"],
        ["npm", "run", "test", "--", "--watch=false"],
        ["yarn", "test"],
        ["go", "test", "./..."],
        ["cargo", "test", "--lib"],
        ["make", "test"],
        ["make", "-C", "sub", "check", "V=1"],
        ["tox", "-e", "py311"],
        ["nox"],
    ],
)
def test_test_mode_allows_test_runners(argv: list[str]) -> None:
    check_argv("test", argv)
    with pytest.raises(PermissionDeniedError):
        check_argv("explore", argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-c", "import pytest"],
        ["python", "-m", "http.server"],
        ["npm", "run", "deploy"],
        ["make", "install"],
        ["make", "test", "deploy"],
        ["go", "run", "."],
    ],
)
def test_test_mode_refuses_other_runs(argv: list[str]) -> None:
    with pytest.raises(PermissionDeniedError):
        check_argv("test", argv)


@pytest.mark.parametrize("mode", WRITE)
@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-c", "print(1)"],
        ["touch", "x"],
        ["rm", "-rf", "build"],
        ["chmod", "-R", "u+w", "."],
        ["git", "commit", "-am", "wip"],
        ["git", "-C", "x", "status"],
        ["bash", "-c", "make && ./run.sh | tee out.log"],
        ["pip", "list"],
        ["npm", "run", "build"],
        ["find", ".", "-name", "*.pyc", "-exec", "rm", "{}", "+"],
    ],
)
def test_write_modes_allow_ordinary_work(mode: str, argv: list[str]) -> None:
    check_argv(mode, argv)


@pytest.mark.parametrize("mode", WRITE)
@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["sudo", "ls"], "privilege escalation"),
        (["/usr/bin/su", "-"], "privilege escalation"),
        (["env", "FOO=1", "sudo", "id"], "privilege escalation"),
        (["nice", "-n", "5", "timeout", "3", "sudo", "id"], "privilege escalation"),
        (["rm", "-rf", "/"], "far beyond the workdir"),
        (["rm", "-fr", "/usr"], "far beyond the workdir"),
        (["rm", "-r", "--no-preserve-root", "/"], "deletes the whole system"),
        (["rm", "-rf", "~"], "far beyond the workdir"),
        (["rm", "-rf", "."], "wipe the whole workdir"),
        (["rm", "-rf", "../other"], "outside the workdir"),
        (["chmod", "-R", "777", "/"], "far beyond the workdir"),
        (["curl", "https://example.com"], "network"),
        (["wget", "x"], "network"),
        (["nc", "-l", "9"], "network"),
        (["ssh", "host"], "network"),
        (["scp", "a", "host:b"], "network"),
        (["git", "push", "origin", "main"], "planner's decision"),
        (["git", "fetch"], "talks to a remote"),
        (["git", "credential", "fill"], "credentials"),
        (["pip", "install", "requests"], "installing"),
        (["python3", "-m", "pip", "install", "x"], "installing"),
        (["npm", "install"], "installing"),
        (["npm", "publish"], "planner's decision"),
        (["apt-get", "install", "x"], "system package managers"),
        (["docker", "run", "x"], "container runtime"),
        (["setsid", "sleep", "100"], "outlives its timeout"),
        (["killall", "python"], "outside the command"),
        (["bash", "-c", "echo hi; sudo rm -rf /tmp/x"], "privilege escalation"),
        (["sh", "-ec", "x=$(curl http://evil)"], "network"),
        (["bash", "-c", "echo `wget x`"], "network"),
        (["bash", "-c", "if true; then FOO=1 git push; fi"], "planner's decision"),
        (["bash", "-c", "eval 'sudo id'"], "privilege escalation"),
        (["find", ".", "-exec", "sudo", "rm", "{}", ";"], "privilege escalation"),
        (["dd", "if=/dev/zero", "of=/dev/sda"], "changes the host"),
        (["mkfs.ext4", "/dev/sda1"], "changes the host"),
    ],
)
def test_write_mode_deny_list(mode: str, argv: list[str], why: str) -> None:
    with pytest.raises(PermissionDeniedError, match=why):
        check_argv(mode, argv)


def test_network_grant_lifts_network_and_install_refusals() -> None:
    check_argv("code", ["curl", "https://example.com"], network=True)
    check_argv("code", ["pip", "install", "requests"], network=True)
    check_argv("code", ["git", "fetch"], network=True)
    with pytest.raises(PermissionDeniedError):
        check_argv("code", ["git", "push"], network=True)
    with pytest.raises(PermissionDeniedError):
        check_argv("code", ["sudo", "ls"], network=True)


def test_unparseable_script_is_refused() -> None:
    with pytest.raises(PermissionDeniedError, match="cannot parse"):
        check_argv("code", ["bash", "-c", "echo 'unterminated"])


@pytest.mark.parametrize("argv", [[], "ls -la", ["ls", 3], ["ls", "a\0b"], [""]])
def test_malformed_argv(argv: object) -> None:
    with pytest.raises(ToolError):
        check_argv("code", argv)  # type: ignore[arg-type]


def test_unknown_mode() -> None:
    with pytest.raises(PermissionDeniedError, match="unknown mode"):
        check_argv("root", ["ls"])
