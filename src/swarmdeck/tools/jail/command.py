"""The launcher's command line for one tool run outside bubblewrap (see launcher.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from swarmdeck.errors import PermissionDeniedError
from swarmdeck.tools.paths import credential_reason
from swarmdeck.tools.visible import (
    etc_entries,
    interpreter_dirs,
    system_dirs,
)

LAUNCHER = Path(__file__).with_name("launcher.py")
# Devices a program may open for writing (everything else under /dev stays closed).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")


def launcher_argv(
    argv: Sequence[str], *, network: bool, landlock_rules: dict[str, list[str]] | None
) -> list[str]:
    """`python -I -S launcher.py OPTIONS -- argv`, confined by `landlock_rules` if any."""
    options = ["--network"] if network else []
    if landlock_rules is not None:
        options.append("--landlock")
        options += [f"--{kind}={path}" for kind, paths in landlock_rules.items() for path in paths]
    return [sys.executable, "-I", "-S", str(LAUNCHER), *options, "--", *argv]


def _inside(path: Path, root: Path) -> bool:
    return path != root and root in path.parents


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
