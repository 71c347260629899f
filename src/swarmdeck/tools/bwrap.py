"""The bubblewrap command line of one tool run: a new root that shows only what tools need.

Nothing of the host is bound unless listed: the system dirs and /etc (less its secrets)
read-only, the interpreter read-only, a private /tmp, /dev and a fresh /proc, then the run
dir and the workdir. /home, /root, every swarmdeck home and every credential file stay out.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from swarmdeck.tools.paths import credential_reason
from swarmdeck.tools.visible import (
    etc_secrets,
    interpreter_dirs,
    system_dirs,
)


def hide_args(path: Path) -> list[str]:
    """bwrap args that cover `path`: an empty tmpfs for a dir, /dev/null for anything else.

    The /dev/null bind lands on a nodev mount, so opening the covered file fails outright.
    """
    if path.is_dir():
        return ["--tmpfs", str(path)]
    return ["--ro-bind", "/dev/null", str(path)]


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _system_binds() -> list[str]:
    """The system dirs read-only (a merged-/usr symlink stays a symlink), and /etc."""
    args: list[str] = []
    for path in system_dirs():
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        else:
            args += ["--ro-bind", str(path), str(path)]
    args += ["--ro-bind", "/etc", "/etc"]
    for secret in etc_secrets():
        args += hide_args(Path(os.path.realpath(secret)) if secret.is_symlink() else secret)
    return args


def bwrap_args(
    *,
    workdir: Path,
    run_dir: Path,
    env: Mapping[str, str],
    writable: bool,
    network: bool,
    hidden_paths: Sequence[Path],
    extra_writable: Sequence[Path] = (),
    extra_readable: Sequence[Path] = (),
) -> list[str]:
    """The bwrap command line (without the command) for one tool run."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try"]  # fmt: skip
    if not network:
        args.append("--unshare-net")
    # We may run as root: without dropping capabilities, root inside could remount the
    # read-only binds writable.
    args += ["--cap-drop", "ALL", *_system_binds()]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # Bound after /tmp: an interpreter under /tmp (a CI venv) must not vanish under it.
    roots: list[tuple[Path, bool]] = [(d, False) for d in interpreter_dirs()]
    # The run dir and the workdir, outer before inner: a workdir may live under its run dir
    # and must stay read-only there.
    roots += sorted([(run_dir, True), (workdir, writable)], key=lambda b: len(b[0].parts))
    # A worktree's index and objects live in the main repository: a commit needs them.
    roots += [(p, True) for p in _existing(extra_writable)] if writable else []
    # An external runner's own install (in swarmdeck's home, which stays hidden around it).
    roots += [(p, False) for p in _existing(extra_readable)]
    hidden = _existing(hidden_paths)
    for root, rw in roots:
        args += ["--bind" if rw else "--ro-bind", str(root), str(root)]
        # Whatever must stay hidden inside what was just bound is covered again (the
        # swarmdeck home may live in the workdir, and the run dir in the home).
        for path in hidden:
            if path != root and _within(path, root):
                args += hide_args(path)
    for path in _workdir_secrets(workdir):
        args += hide_args(path)
    args += ["--chdir", str(workdir), "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return args


def _existing(paths: Sequence[Path]) -> list[Path]:
    """Resolved paths that exist (bwrap cannot mount over a missing path)."""
    seen: dict[Path, None] = {}
    for raw in paths:
        path = Path(os.path.realpath(raw))
        if path.exists() and path != Path("/"):
            seen[path] = None
    return list(seen)


def _workdir_secrets(workdir: Path) -> list[Path]:
    """Top-level .env files in the workdir: the file tools refuse them, so does the shell."""
    return [
        p
        for p in sorted(workdir.glob(".env*"))
        if p.is_file() and not p.is_symlink() and credential_reason(p)
    ]
