"""The layout of a tool run whose user opted out of the sandbox: the whole machine, less
swarmdeck's own home and the user's credentials.

The opt-out lifts the confinement to the workdir, nothing else: a command still cannot open
the credential store or anything else in the home (a pattern check on its arguments is
beaten by `python -c`, `sh -c`, a symlink or a copy), still has no network unless its
profile grants it, and still runs with a rebuilt environment. The home is kept out of the
process's view, not filtered from its arguments:

- bubblewrap: the host's root bound as it is, an empty tmpfs over each hidden path, a fresh
  /dev and /proc in its own pid namespace (no raw disk, no other process's memory);
- Landlock: read and write granted beneath every path of the machine except the hidden
  ones (a grant covers what exists now: a new entry beside a hidden path stays closed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from swarmdeck.errors import PermissionDeniedError
from swarmdeck.tools.bwrap import hide_args
from swarmdeck.tools.jail.command import DEVICES, grants_excluding

# Never granted by the Landlock layout as a whole: raw devices (DEVICES alone), and /proc
# read-only (a process's files are its own business).
_NOT_GRANTED = (Path("/dev"), Path("/proc"))


def _real(paths: Sequence[Path]) -> list[Path]:
    return list(dict.fromkeys(Path(os.path.realpath(p)) for p in paths))


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def refuse_hidden_workdir(workdir: Path, hidden: Sequence[Path]) -> None:
    """A workdir that is a hidden path or lies above one in a way we cannot split: the
    workdir being the home itself would show the home."""
    for path in hidden:
        if workdir == path:
            raise PermissionDeniedError(
                f"the workdir {workdir} is swarmdeck's home or a credential dir: tools may "
                "not run there; pick a project directory (-C DIR)"
            )


def _shown_again(roots: Sequence[Path], hidden: Sequence[Path]) -> list[Path]:
    """The roots a tool needs (run dir, workdir, a worktree's git dirs) that lie inside a
    hidden path and must be shown again on top of its cover."""
    return [r for r in roots if any(_within(r, h) and r != h for h in hidden)]


def open_bwrap_args(
    *,
    workdir: Path,
    run_dir: Path,
    env: Mapping[str, str],
    network: bool,
    hidden_paths: Sequence[Path],
    extra_writable: Sequence[Path] = (),
    extra_readable: Sequence[Path] = (),
) -> list[str]:
    """The bwrap command line (without the command) of an opted-out run."""
    hidden = [p for p in _real(hidden_paths) if p.exists() and p != Path("/")]
    refuse_hidden_workdir(workdir, hidden)
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try"]  # fmt: skip
    if not network:
        args.append("--unshare-net")
    # Root inside without capabilities cannot unmount the covers.
    args += ["--cap-drop", "ALL", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for path in hidden:
        args += hide_args(path)
    roots = [run_dir, workdir, *_real(extra_writable)]
    for root in sorted(_shown_again(roots, hidden), key=lambda p: len(p.parts)):
        args += ["--bind", str(root), str(root)]
    for root in _shown_again(_real(extra_readable), hidden):
        args += ["--ro-bind", str(root), str(root)]
    args += ["--chdir", str(workdir), "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    return args


def open_landlock_rules(
    *,
    workdir: Path,
    run_dir: Path,
    hidden_paths: Sequence[Path],
    extra_writable: Sequence[Path] = (),
    extra_readable: Sequence[Path] = (),
) -> dict[str, list[str]]:
    """Landlock rules of an opted-out run: everything but the hidden paths."""
    hidden = _real(hidden_paths)
    refuse_hidden_workdir(workdir, hidden)
    everything = grants_excluding(Path("/"), [*hidden, *_NOT_GRANTED])
    write = [str(p) for p in everything]
    write += [str(p) for p in (run_dir, workdir, *_real(extra_writable))]
    read = ["/proc", *(str(p) for p in _real(extra_readable))]
    return {"read": read, "write": write, "list": [], "device": list(DEVICES)}
