"""Sizes of folders and the files the maintenance tools remove."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def tree_size(path: Path) -> tuple[int, int]:
    """(files, bytes) under a folder (or of a file); (0, 0) when it is not there."""
    if path.is_file():
        return 1, path.stat().st_size
    files = size = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            files += 1
            size += st.st_size
    return files, size


def remove_tree(path: Path, inside: Path) -> int:
    """Delete a folder that lies inside `inside` (never anything else); bytes freed."""
    try:
        path.resolve().relative_to(inside.resolve())
    except ValueError:
        return 0
    if path.resolve() == inside.resolve() or not path.exists():
        return 0
    _, size = tree_size(path)
    shutil.rmtree(path, ignore_errors=True)
    return size
