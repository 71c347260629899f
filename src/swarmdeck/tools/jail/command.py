"""The launcher's command line for one tool run outside bubblewrap (see launcher.py), and
the kept executor's (see executor.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from swarmdeck.errors import PermissionDeniedError
from swarmdeck.tools.paths import credential_reason
from swarmdeck.tools.sandbox_info import SandboxKind
from swarmdeck.tools.visible import (
    etc_entries,
    interpreter_dirs,
    system_dirs,
)

LAUNCHER = Path(__file__).with_name("launcher.py")
EXECUTOR = Path(__file__).with_name("executor.py")
# Devices a program may open for writing (everything else under /dev stays closed).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


def launcher_options(*, network: bool, landlock_rules: dict[str, list[str]] | None) -> list[str]:
    """The options the launcher (or the executor) confines a command by."""
    options = ["--network"] if network else []
    if landlock_rules is not None:
        options.append("--landlock")
        options += [f"--{kind}={path}" for kind, paths in landlock_rules.items() for path in paths]
    return options


def launcher_argv(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """`python -I -S launcher.py OPTIONS -- argv` (OPTIONS: launcher_options)."""
    return [sys.executable, "-I", "-S", str(LAUNCHER), *options, "--", *argv]


def executor_argv(options: Sequence[str], control_fd: int) -> list[str]:
    """`python -I -S executor.py OPTIONS --control=FD --`: a kept executor's command line.
    The interpreter's path normalised: bubblewrap shows its dir, not a `bench/..` on the way."""
    python = os.path.normpath(sys.executable)
    return [python, "-I", "-S", str(EXECUTOR), *options, f"--control={control_fd}", "--"]


def _inside(path: Path, root: Path) -> bool:
    """`path` lies strictly beneath `root` (both absolute and normal): by their text, as
    `root in path.parents` would say, at a fraction of its cost (it runs per command)."""
    top = str(root)
    return path != root and str(path).startswith(top if top.endswith("/") else top + "/")


def landlock_rules(
    *,
    workdir: Path,
    run_dir: Path,
    writable: bool,
    hidden_paths: Sequence[Path],
    extra_writable: Sequence[Path] = (),
    extra_readable: Sequence[Path] = (),
) -> dict[str, list[str]]:
    """What the tool may list, read and write.

    Landlock only grants, and a grant covers everything beneath it: a read-only mode gets
    the workdir listable, and its entries readable except the hidden ones (credential
    files, a swarmdeck home inside it). A write mode needs the whole workdir, so a hidden
    directory inside it is refused; its top-level .env files stay readable (bubblewrap
    hides them).
    """
    hidden = [Path(os.path.realpath(p)) for p in hidden_paths]
    read = [str(p) for p in system_dirs()] + [str(p) for p in etc_entries()]
    read += [str(p) for p in interpreter_dirs() if not any(_inside(h, p) for h in hidden)]
    read += [str(p) for p in extra_readable]
    write, listable = [str(run_dir)], []
    if writable:
        inside = [h for h in hidden if _inside(h, workdir) and h.exists()]
        if inside:
            raise PermissionDeniedError(
                f"{inside[0]} lies inside the workdir and Landlock cannot hide it from a "
                "write mode; install bubblewrap (apt install bubblewrap) or move it out"
            )
        write += [str(workdir), *(str(p) for p in extra_writable)]
    else:
        secrets = [p for p in _top_level(workdir) if p.is_file() and credential_reason(p)]
        listable.append(str(workdir))
        read += [str(p) for p in grants_excluding(workdir, [*hidden, *secrets])]
    return {"read": read, "write": write, "list": listable, "device": list(DEVICES)}


def _top_level(folder: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(folder)]
    except OSError:
        return []


def grants_excluding(root: Path, excluded: Sequence[Path]) -> list[Path]:
    """Paths whose grants cover everything under `root` except the `excluded` paths.

    Symlinks are never granted: Landlock would grant their target, which may lie anywhere
    (a link in the workdir to the home); what a link inside `root` points to is granted as
    itself."""
    inside = [p for p in excluded if _inside(p, root)]
    if not inside:
        return [] if root in excluded else [root]
    grants: list[Path] = []
    for entry in _top_level(root):
        if entry in excluded or entry.is_symlink():
            continue
        if any(_inside(p, entry) for p in inside):
            grants += grants_excluding(entry, inside)
        else:
            grants.append(entry)
    return grants


@dataclass(frozen=True)
class Layout:
    """What confines one run, its command aside: bubblewrap's arguments (their `--setenv`s
    included), or the launcher's options. Equal layouts confine alike."""

    runner: SandboxKind
    args: tuple[str, ...]

    def command_line(self, argv: Sequence[str]) -> list[str]:
        """The one-shot command line: a fresh bwrap or launcher for `argv` alone."""
        if self.runner == "bwrap":
            return [*self.args, "--", *argv]
        return launcher_argv(argv, self.args)

    def executor_line(self, control_fd: int) -> list[str]:
        """The command line of a kept executor confined the same way."""
        if self.runner == "bwrap":
            return [*self.args, "--", *executor_argv(["--bwrap"], control_fd)]
        return executor_argv(self.args, control_fd)

    def fingerprint(self) -> tuple[tuple[int, int] | None, ...]:
        """Which file each path of the layout names now. A cover or a grant holds the file
        it was made on: one replaced since (an editor's atomic save of .env) needs a new
        executor, as it would have got a new sandbox."""
        marks: list[tuple[int, int] | None] = []
        for arg in self.args:
            path = arg.partition("=")[2] if arg.startswith("--") else arg
            if not path.startswith("/"):
                continue
            try:
                found = os.stat(path)
            except OSError:
                marks.append(None)
                continue
            marks.append((found.st_dev, found.st_ino))
        return tuple(marks)
