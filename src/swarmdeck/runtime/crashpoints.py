"""Named crash points for chaos tests: SWARMDECK_CRASH_AT=name[:n] SIGKILLs at the n-th hit."""

from __future__ import annotations

import os
import signal
from collections import Counter

_hits: Counter[str] = Counter()


def crash_point(name: str) -> None:
    """Kill this process with SIGKILL here when a test asked for it; a no-op otherwise."""
    spec = os.environ.get("SWARMDECK_CRASH_AT")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    _hits[name] += 1
    if _hits[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
