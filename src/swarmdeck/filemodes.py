"""Private files and directories: what swarmdeck stores (transcripts, keys, artifacts) is
readable by its user alone, from the moment it exists."""

from __future__ import annotations

import os
import secrets
import stat
import sys
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` and its missing parents 0700; set `path` itself to 0700.

    The process's umask is left alone: every thread shares it, and two threads that each
    set and restored it left it at 0077 for good (the second restored the first's value),
    for every file the process and its children made afterwards. mkdir's mode can only be
    narrowed by the umask, never widened, and each new directory is then set exactly.
    """
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another thread or process
        os.chmod(folder, DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Create `path` empty and 0600 if missing, else set it to 0600.

    An existing file is never opened: closing any descriptor of a SQLite file drops the
    locks its connections in this process hold (POSIX locks are per process), and a
    store whose locks vanish under a writer gets corrupted.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    except FileExistsError:
        # Only when looser: a store on a read-only mount must still be opened to be read.
        if stat.S_IMODE(os.stat(path).st_mode) != FILE_MODE:
            os.chmod(path, FILE_MODE)
        return path
    os.close(fd)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` with `data` atomically, 0600 from creation."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), FILE_MODE)
        handle.write(data)
    os.replace(tmp, path)


def replace_atomically(path: Path, data: bytes, mode: int | None, suffix: str = ".tmp") -> None:
    """Replace `path` with `data` through a fresh temp file beside it: no symlink followed,
    `mode` set before any byte lands (None: the umask's default), synced before the rename.
    A failure leaves `path` as it was and no temp file."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}{suffix}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode or 0o666)
    try:
        if mode is not None:
            os.fchmod(fd, mode)  # umask-proof
        with os.fdopen(fd, "wb", closefd=False) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)


def private_home(home: Path) -> None:
    """Create the home 0700; an existing one that others can enter is tightened, with a
    note on stderr (it holds the store, the keys and every run's files)."""
    if not home.exists():
        private_dir(home)
        return
    mode = stat.S_IMODE(home.stat().st_mode)
    if mode & 0o077 and _owner_is_me(home):
        os.chmod(home, DIR_MODE)
        print(
            f"swarmdeck: note: {home} was {mode:o}; made it 700 (only you may read it)",
            file=sys.stderr,
        )


def _owner_is_me(path: Path) -> bool:
    return path.stat().st_uid == os.geteuid()
