"""The per-mode shell policy: which argv a shell tool may run in which mode.

Write modes (code, resume, agent) use a deny-list; read-only modes (explore, review) an
allow-list of commands that cannot change files or reach the network; test mode adds test
runners. In a read-only mode every program argv would run (the launchers' inner ones too)
is resolved to its real path and must be installed in a trusted dir, never in the workdir:
`./cat` or `/tmp/x/cat` is not `cat`. The deny-list catches mistakes and obvious intent,
not a determined program: any interpreter can do what a denied command does. What holds
against that is the sandbox (read-only binds, no network, no credentials mounted) and the
rebuilt environment.

How an argv is read (wrappers, git's subcommand, a shell script's commands) is
tools/command_line.py; this file decides on what it read.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.tools.base import WRITE_MODES
from swarmdeck.tools.command_line import (  # noqa: F401 (unwrap_chain, RUNS_ANOTHER_RE: public)
    FIND_EXEC,
    GIT_VALUE_OPTS,
    RUNS_ANOTHER_RE,
    denied,
    find_exec_commands,
    first_word,
    git_subcommand,
    git_subcommand_at,
    program,
    script_commands,
    shell_script,
    unwrap,
    unwrap_chain,
)
from swarmdeck.tools.visible import tool_path, trusted_program_dirs
from swarmdeck.workspace.safegit import no_program_options

# Shells: each command of `sh -c SCRIPT` is judged on its own.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "busybox", "ash"})

# --- read-only modes ------------------------------------------------------------------------

READ_ONLY_COMMANDS = frozenset(
    {
        "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "find", "git",
        "sed", "stat", "file", "tree", "pwd", "echo", "printf", "du", "df", "basename",
        "dirname", "realpath", "readlink", "sort", "cut", "nl", "tac", "rev", "diff", "cmp",
        "comm", "join", "paste", "fold", "column", "md5sum", "sha1sum", "sha256sum",
        "sha512sum", "od", "hexdump", "strings", "jq", "which", "env", "true", "false",
        "uname", "whoami", "id",
    }
)  # fmt: skip
_REFUSED_OPTIONS: dict[str, frozenset[str]] = {
    "find": FIND_EXEC | {"-delete", "-fprint", "-fprint0", "-fprintf", "-fls"},
    "rg": frozenset({"--pre"}),
    "sort": frozenset({"--output", "--compress-program"}),
    "file": frozenset({"--compile"}),
}
# The same as short options, also inside clusters such as `-uo`.
_REFUSED_SHORT: dict[str, str] = {"sort": "o", "tree": "o", "file": "C"}
# Read-only git subcommands; branch and remote only list.
_GIT_READ = frozenset(
    {"log", "show", "diff", "status", "blame", "ls-files", "ls-tree", "rev-parse", "grep",
     "shortlog", "describe", "cat-file", "rev-list", "merge-base", "show-ref", "branch",
     "remote"}
)  # fmt: skip
_GIT_LIST_ONLY = {
    "branch": frozenset({"--list", "-a", "--all", "-r", "--remotes", "-v", "-vv",
                         "--show-current", "--no-color"}),
    "remote": frozenset({"-v", "--verbose"}),
}  # fmt: skip
# Diff and pager options that write a file or run a program named in config.
_GIT_REFUSED_PREFIXES = (
    "--output", "--ext-diff", "--textconv", "--filters", "-O", "--open-files-in-pager",
)  # fmt: skip
# Options that have git run git in each submodule, with the submodule's own config (its
# filters are not switched off): allowed only with the values that keep git out of them.
_GIT_SUBMODULE_VALUES = {
    "--ignore-submodules": frozenset({None, "all", "dirty"}),
    "--submodule": frozenset({"short"}),
    "--recurse-submodules": frozenset(),
}
# sed scripts limited to printing: addresses followed by p, =, l or q.
_SED_ADDR = r"(?:\d+(?:~\d+)?|\$|/(?:[^/\\]|\\.)*/I?)"
_SED_CMD = re.compile(rf"^\s*(?:{_SED_ADDR}(?:\s*,\s*(?:{_SED_ADDR}|\+\d+))?)?\s*!?\s*[p=lq]\s*$")

# --- test mode --------------------------------------------------------------------------

_TEST_TARGETS = frozenset({"test", "tests", "check"})
_PY_SAFE_FLAGS = frozenset({"-B", "-u", "-I", "-E", "-s", "-O", "-OO", "-q"})
_PYTHON_RE = re.compile(r"^python(?:\d(?:\.\d+)?)?$")

# --- write modes ------------------------------------------------------------------------

_DENIED: dict[str, str] = {}
for _names, _why in (
    ("sudo su doas pkexec runuser chroot nsenter unshare setpriv capsh", "privilege escalation"),
    (
        "shutdown reboot halt poweroff init telinit systemctl service mount umount swapon "
        "swapoff fdisk sfdisk parted mkswap iptables ip6tables nft modprobe insmod rmmod "
        "sysctl useradd userdel usermod groupadd passwd chpasswd visudo",
        "changes the host system",
    ),
    ("crontab at batch", "schedules work outside the run"),
    (
        "kill pkill killall setsid screen tmux daemonize start-stop-daemon",
        "touches processes outside the command, or outlives its timeout",
    ),
    ("docker podman nerdctl ctr kubectl lxc", "a container runtime controls the host"),
    (
        "apt apt-get aptitude dpkg yum dnf rpm apk pacman zypper brew snap flatpak",
        "system package managers change the host",
    ),
):
    _DENIED.update(dict.fromkeys(_names.split(), _why))
# Network clients: without the sandbox they are the only thing between a model and the
# internet (exfiltration, downloads); allowed only when the run's profile grants network.
NETWORK_COMMANDS = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "socat", "ssh", "scp", "sftp", "telnet", "ftp",
     "aria2c", "http", "https"}
)  # fmt: skip
# Installers change an environment shared beyond the workdir and fetch code from the
# network, so they follow the network grant too.
_INSTALL_SUBCOMMANDS: dict[str, frozenset[str]] = {
    "pip": frozenset({"install", "uninstall", "download"}),
    "pipx": frozenset({"install", "inject", "upgrade", "run"}),
    "uv": frozenset({"add", "sync", "tool"}),
    "poetry": frozenset({"add", "install", "update"}),
    "npm": frozenset({"install", "i", "ci", "add", "update", "uninstall"}),
    "yarn": frozenset({"add", "install", "upgrade", "remove"}),
    "pnpm": frozenset({"add", "install", "i", "update", "remove"}),
    "cargo": frozenset({"install", "add"}),
    "go": frozenset({"install", "get"}),
    "gem": frozenset({"install", "update"}),
    "composer": frozenset({"require", "install", "update"}),
}
# git subcommands that talk to a remote; push publishes, which is the planner's call.
_GIT_NETWORK = frozenset({"fetch", "pull", "clone", "ls-remote", "submodule"})
_GIT_ALWAYS_DENIED = {"push": "publishing is the planner's decision", "credential": "credentials"}
# Publishing is the planner's decision whatever the network grant.
_PUBLISH: dict[str, frozenset[str]] = {
    "npm": frozenset({"publish"}),
    "yarn": frozenset({"publish"}),
    "pnpm": frozenset({"publish"}),
    "cargo": frozenset({"publish"}),
    "poetry": frozenset({"publish"}),
    "twine": frozenset({"upload"}),
    "gh": frozenset({"release", "pr", "repo", "auth", "api", "secret"}),
}
# Recursive deletes/permission changes of these targets wipe far more than the workdir.
_ROOT_LIKE = frozenset({"/", "/*", "/.", "~", "~/", "~/*", "$HOME", "${HOME}", "..", "../"})
# Deleting the whole workdir is never the task (it is the planner's tree or worktree).
_WORKDIR_WIPE = frozenset({".", "./", "*", "./*"})


def check_command(mode: str, argv: Sequence[str], *, workdir: Path, network: bool = False) -> None:
    """Raise PermissionDeniedError (with the reason) if `mode` may not run `argv` in
    `workdir`: its shape and names (check_argv), then in a read-only mode every program
    it would run, by real path."""
    check_argv(mode, argv, network=network)
    if mode in WRITE_MODES:
        return
    for level in unwrap_chain(mode, list(argv), strict=True):
        check_program_path(mode, level[0], Path(workdir))


def check_argv(mode: str, argv: Sequence[str], *, network: bool = False) -> None:
    """Raise PermissionDeniedError (with the reason) if `mode` may not run `argv`, judging
    its shape and program names only (check_command adds where the programs live)."""
    _check_argv(argv)
    if mode in WRITE_MODES:
        _check_denied(mode, list(argv), network)
    elif mode in ("explore", "review"):
        _check_read_only(mode, list(argv), tests=False)
    elif mode == "test":
        _check_read_only(mode, list(argv), tests=True)
    else:
        raise PermissionDeniedError(f"unknown mode {mode!r}")


def _check_argv(argv: Sequence[str]) -> None:
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
        raise ToolError("argv must be a non-empty list of strings (no shell string)")
    if any("\0" in a for a in argv):
        raise ToolError("argv contains a NUL byte")
    if not argv[0]:
        raise ToolError("argv[0] is empty")


# --- programs by path -----------------------------------------------------------------------


def resolve_program(name: str, workdir: Path) -> Path | None:
    """Where `name` would be found when run in `workdir` with the tools' PATH (not resolved
    through symlinks), or None."""
    if "/" in name:
        path = Path(name) if os.path.isabs(name) else workdir / name
        return Path(os.path.abspath(path)) if os.path.isfile(path) else None
    found = shutil.which(name, path=tool_path())
    return Path(os.path.abspath(found)) if found else None


def check_program_path(mode: str, name: str, workdir: Path) -> Path:
    """The program `name` runs, refused unless it is installed in a trusted dir (the
    system's, the interpreter's) and lies outside the workdir, whatever symlinks say."""
    found = resolve_program(name, workdir)
    if found is None:
        raise denied(mode, name, "no such program in the system's or the interpreter's dirs")
    real = Path(os.path.realpath(found))
    root = Path(os.path.realpath(workdir))
    if any(p == root or root in p.parents for p in (found, real)):
        raise denied(mode, name, "a program inside the workdir never runs in a read-only mode")
    trusted = trusted_program_dirs()
    if Path(os.path.realpath(found.parent)) not in trusted or real.parent not in trusted:
        raise denied(
            mode,
            name,
            f"it resolves to {real}; read-only modes run only programs installed in "
            "the system's or the interpreter's bin dirs",
        )
    return found


# --- read-only ------------------------------------------------------------------------------


def _check_read_only(mode: str, argv: list[str], *, tests: bool) -> None:
    argv = unwrap(mode, argv)
    prog = program(argv)
    if prog in SHELLS:
        raise denied(mode, prog, "shell interpreters are refused; pass the argv directly")
    if tests and _is_test_runner(argv):
        return
    if prog not in READ_ONLY_COMMANDS:
        allowed = ", ".join(sorted(READ_ONLY_COMMANDS))
        extra = " and test runners (pytest, npm test, go test, cargo test, make test...)"
        raise denied(
            mode,
            prog,
            f"not on the read-only allow-list ({allowed}{extra if tests else ''})",
        )
    checker = _READ_ONLY_CHECKS.get(prog)
    if checker:
        checker(mode, argv)
    refused, short = _REFUSED_OPTIONS.get(prog, frozenset()), _REFUSED_SHORT.get(prog, "")
    for arg in argv[1:]:
        cluster = arg[1:] if arg.startswith("-") and not arg.startswith("--") else ""
        if arg.split("=", 1)[0] in refused or any(c in cluster for c in short):
            raise denied(mode, f"{prog} {arg}", "it writes files or runs commands")


def _check_git_read(mode: str, argv: list[str]) -> None:
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        opt = argv[i].split("=", 1)[0]
        if opt in ("-c", "--config-env", "--exec-path"):
            raise denied(mode, f"git {opt}", "it can make git run arbitrary programs")
        i += 2 if opt in GIT_VALUE_OPTS and "=" not in argv[i] else 1
    sub = argv[i] if i < len(argv) else ""
    if sub not in _GIT_READ:
        raise denied(mode, f"git {sub or '(no subcommand)'}", "not a read-only git command")
    rest = argv[i + 1 :]
    listing = _GIT_LIST_ONLY.get(sub)
    if listing is not None and any(a not in listing for a in rest):
        raise denied(mode, f"git {sub} {' '.join(rest)}", "only listing is allowed")
    for arg in rest:
        if arg.startswith(_GIT_REFUSED_PREFIXES):
            raise denied(mode, f"git {sub} {arg}", "it writes files or runs commands")
        name, eq, value = arg.partition("=")
        allowed = _GIT_SUBMODULE_VALUES.get(name)
        if allowed is not None and (value if eq else None) not in allowed:
            raise denied(
                mode, f"git {sub} {arg}", "it runs git in submodules, under their own config"
            )


def _check_sed_read(mode: str, argv: list[str]) -> None:
    quiet, scripts, positional = False, [], []
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-n", "--quiet", "--silent"):
            quiet = True
        elif arg in ("-e", "--expression"):
            scripts.append(next(args, ""))
        elif arg.startswith("--expression="):
            scripts.append(arg.split("=", 1)[1])
        elif arg.startswith("--in-place") or arg in ("-f", "--file") or arg.startswith("--file="):
            raise denied(mode, f"sed {arg}", "only printing with sed -n is allowed")
        elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            if "i" in arg or "f" in arg:
                raise denied(mode, f"sed {arg}", "only printing with sed -n is allowed")
            quiet = quiet or "n" in arg
        else:
            positional.append(arg)
    if not scripts and positional:
        scripts.append(positional.pop(0))
    if not quiet:
        raise denied(mode, "sed without -n", "only printing with sed -n is allowed")
    for script in scripts:
        for command in re.split(r"[;\n]", script):
            if command.strip() and not _SED_CMD.match(command):
                raise denied(mode, f"sed script {command.strip()!r}", "only p, =, l, q")


_READ_ONLY_CHECKS: dict[str, Callable[[str, list[str]], None]] = {
    "git": _check_git_read,
    "sed": _check_sed_read,
}


def _is_test_runner(argv: list[str]) -> bool:
    """True for the test runners test mode may start."""
    prog, args = program(argv), argv[1:]
    if prog in ("pytest", "py.test", "tox", "nox", "ctest", "jest", "vitest", "mocha"):
        return True
    if _PYTHON_RE.match(prog):
        return _is_python_test(args)
    if prog in ("npm", "yarn", "pnpm", "bun"):
        words = [a for a in args if not a.startswith("-")]
        return words[:1] in (["test"], ["t"]) or words[:2] == ["run", "test"]
    if prog in ("go", "cargo", "mvn", "gradle", "gradlew", "deno"):
        return first_word(args) == "test"
    if prog == "npx":
        return first_word(args) in ("jest", "vitest", "mocha")
    if prog == "make":
        return _is_make_test(args)
    return False


def _is_python_test(args: list[str]) -> bool:
    i = 0
    while i < len(args) and args[i] in _PY_SAFE_FLAGS:
        i += 1
    return args[i : i + 1] == ["-m"] and args[i + 1 : i + 2] in (["pytest"], ["unittest"])


def _is_make_test(args: list[str]) -> bool:
    targets, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg in ("-C", "-f", "-j", "-l", "-I", "-o", "-W", "--directory", "--file"):
            i += 2
            continue
        if not arg.startswith("-") and "=" not in arg:
            targets.append(arg)
        i += 1
    return bool(targets) and all(t in _TEST_TARGETS for t in targets)


# --- write modes ------------------------------------------------------------------------


def _check_denied(mode: str, argv: list[str], network: bool) -> None:
    argv = unwrap(mode, argv)
    prog = program(argv)
    if prog in _DENIED or prog.startswith("mkfs"):
        raise denied(mode, prog, _DENIED.get(prog, "changes the host system"))
    if prog in NETWORK_COMMANDS and not network:
        raise denied(mode, prog, "network tools need a profile that allows network")
    if prog == "rsync" and not network and any(":" in a for a in argv[1:]):
        raise denied(mode, "rsync to a remote", "needs a profile that allows network")
    if prog in SHELLS:
        _check_shell_script(mode, argv, network)
    elif prog == "git":
        _check_git_write(mode, argv, network)
    elif prog in ("rm", "chmod", "chown", "chgrp", "shred"):
        _check_root_targets(mode, argv)
    elif prog == "dd" and any(a.startswith("of=/dev/") for a in argv[1:]):
        raise denied(mode, "dd to a device", "changes the host system")
    elif prog == "find":
        for command in find_exec_commands(argv):
            _check_denied(mode, command, network)
    _check_installers(mode, argv, network)


def _check_git_write(mode: str, argv: list[str], network: bool) -> None:
    sub = git_subcommand(argv)
    base = sub.split("-", 1)[0] if sub.startswith("credential") else sub
    if base in _GIT_ALWAYS_DENIED:
        raise denied(mode, f"git {sub}", _GIT_ALWAYS_DENIED[base])
    if sub in _GIT_NETWORK and not network:
        raise denied(mode, f"git {sub}", "talks to a remote; needs a profile that allows network")


def _check_root_targets(mode: str, argv: list[str]) -> None:
    prog, args = program(argv), argv[1:]
    if "--no-preserve-root" in args:
        raise denied(mode, f"{prog} --no-preserve-root", "deletes the whole system")
    recursive = (
        any(
            a in ("--recursive", "-R")
            or (a.startswith("-") and not a.startswith("--") and "r" in a)
            for a in args
        )
        or prog == "shred"
    )
    if not recursive:
        return
    home = os.path.expanduser("~")
    for target in (a for a in args if not a.startswith("-")):
        norm = target.rstrip("/") or "/"
        shallow = norm.startswith("/") and norm.count("/") <= 1
        if target in _ROOT_LIKE or norm in (home, os.path.dirname(home)) or shallow:
            raise denied(mode, f"{prog} -r {target}", "reaches far beyond the workdir")
        if prog in ("rm", "shred") and target in _WORKDIR_WIPE:
            raise denied(mode, f"{prog} -r {target}", "it would wipe the whole workdir")
        if norm == ".." or target.startswith("../"):
            raise denied(mode, f"{prog} -r {target}", "reaches outside the workdir")


def _check_installers(mode: str, argv: list[str], network: bool) -> None:
    prog, args = program(argv), argv[1:]
    if _PYTHON_RE.match(prog) and args[:2] == ["-m", "pip"]:
        prog, args = "pip", args[2:]
    if prog == "uv" and first_word(args) == "pip":
        prog, args = "pip", args[args.index("pip") + 1 :]
    if re.match(r"^pip\d*(\.\d+)?$", prog):
        prog = "pip"
    if first_word(args) in _PUBLISH.get(prog, frozenset()):
        raise denied(mode, f"{prog} {first_word(args)}", "publishing is the planner's decision")
    subs = _INSTALL_SUBCOMMANDS.get(prog)
    if subs and first_word(args) in subs and not network:
        raise denied(
            mode,
            f"{prog} {first_word(args)}",
            "installing changes a shared environment and downloads code; "
            "needs a profile that allows network",
        )


def _check_shell_script(mode: str, argv: list[str], network: bool) -> None:
    """Check each command of `sh -c SCRIPT` against the deny-list."""
    script = shell_script(argv)
    if script is None:
        return  # a script file the model wrote: the sandbox, not this list, bounds it
    try:
        commands = script_commands(script)
    except ValueError as exc:
        raise denied(mode, f"{program(argv)} -c", f"cannot parse the script ({exc})") from exc
    for command in commands:
        if command[0] == "eval":
            _check_shell_script(mode, ["sh", "-c", " ".join(command[1:])], network)
        else:
            _check_denied(mode, command, network)


# Repository config can name programs that read-only git commands run (workspace/safegit.py
# switches off most); these subcommands also run an external diff and text converters,
# and status and diff run git in each dirty submodule unless told not to on the command
# line (.gitmodules can undo the config's setting).
_GIT_SUB_OPTIONS = {
    "diff": ("--no-ext-diff", "--no-textconv", "--ignore-submodules=dirty"),
    "log": ("--no-ext-diff", "--no-textconv"),
    "show": ("--no-ext-diff", "--no-textconv"),
    "blame": ("--no-textconv",),
    "status": ("--ignore-submodules=dirty",),
}


def hardened(mode: str, argv: list[str], workdir: Path) -> list[str]:
    """argv as a read-only mode runs it in `workdir`: git told to run no program its
    config names."""
    if mode in WRITE_MODES or program(argv) != "git":
        return argv
    at = git_subcommand_at(argv)
    options = no_program_options(workdir, argv[1:at])
    if at >= len(argv):
        return [argv[0], *options, *argv[1:]]
    extra = _GIT_SUB_OPTIONS.get(argv[at], ())
    return [argv[0], *options, *argv[1 : at + 1], *extra, *argv[at + 1 :]]
