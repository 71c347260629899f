"""examples/quickstart.py runs offline against the fake LLM (SWARMDECK_EXAMPLE_FAKE=1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import cli_env

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


def test_quickstart_runs_offline(sd_home: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env=cli_env(sd_home, SWARMDECK_EXAMPLE_FAKE="1"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    # Stopping cancels the idle sessions' workflows on purpose: no engine warning leaks.
    assert "Asyncio task cancelled" not in proc.stderr and "WARNING" not in proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:4] == [
        "task [completed]: There are 4 words.",
        "notes: Added milk.",
        "notes: Added eggs.",
        "coordinator [completed]: Report stored as stores.md.",
    ]
    assert lines[4].startswith("artifact://") and lines[4].endswith("/stores.md: all finished")
    assert sum("a fine database." in line for line in lines) == 2
    # Offline mode keeps to its own throwaway home.
    assert not (sd_home / "swarmdeck.sqlite").exists()
