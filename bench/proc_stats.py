"""A process's resident memory and CPU time, read from /proc."""

from __future__ import annotations

import os
import resource
from pathlib import Path


def rss_mib(pid: int | str = "self") -> float:
    """A process's resident memory now (this one's by default)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s(pid: int) -> float:
    """The CPU seconds (user + system) a live process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
