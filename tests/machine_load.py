"""Bounds on time that a loaded machine stretches.

The suite runs several test processes at once on few cores: a loaded machine stretches
every step alike, so a bound a quiet machine meets stretches by the run queue per core of
the last minute (never shrinks). The benches measure the goals themselves, on a quiet
machine.
"""

from __future__ import annotations

import os


def stretched_by_load(seconds: float) -> float:
    """`seconds`, stretched by the load per core of the last minute (never shrunk)."""
    return seconds * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
