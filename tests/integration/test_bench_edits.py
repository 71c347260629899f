"""bench/edits.py runs at its quick size and ends with its closing line, meeting its goal."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench" / "edits.py"


def test_the_edits_bench_runs_quick_and_ends_with_its_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"edits: (\d+\.\d)x fewer output tokens than whole-file writes", last)
    assert match, last
    assert float(match.group(1)) >= 20, last  # the goal for one-hunk edits
    assert "one 5-file patch of a small repository:" in proc.stdout
