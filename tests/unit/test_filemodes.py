"""Private directories are made 0700 without touching the process's umask, which every
thread shares: threads that set and restored it left it at 0077 for good (files the
process and its tools' commands made afterwards lost their group and other bits)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from swarmdeck.filemodes import private_dir


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_threads_making_private_dirs_leave_the_umask_as_it_was(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:

        def make(k: int) -> None:
            for i in range(500):
                private_dir(tmp_path / f"t{k}" / f"d{i}" / "inner")

        threads = [threading.Thread(target=make, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(old)
    made = [p for p in tmp_path.rglob("*") if p.is_dir()]
    assert len(made) == 4 * (1 + 2 * 500)
    assert {_mode(p) for p in made} == {0o700}


def test_missing_parents_are_private_and_existing_ones_keep_their_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    old = os.umask(0)  # the loosest a user may have: only the modes set here protect it
    try:
        target = private_dir(shared / "a" / "b")
        again = private_dir(target)
    finally:
        os.umask(old)
    assert again == target
    assert (_mode(shared / "a"), _mode(target)) == (0o700, 0o700)
    assert _mode(shared) == 0o755
