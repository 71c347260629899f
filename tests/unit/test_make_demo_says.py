"""`make demo` says what it is doing before its quiet install (issue 30, item 20: it printed
nothing for its first 20 s)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_announces_each_quiet_step(tmp_path: Path) -> None:
    # A dry run from scratch (-B: as on a fresh clone) lists the recipe's commands in order.
    planned = subprocess.run(
        ["make", "-n", "-B", "-C", str(ROOT), "demo", f"VENV={tmp_path / 'venv'}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    quiet = [i for i, line in enumerate(planned) if "pip install -q" in line or "test-deps" in line]
    assert quiet, planned
    for index in quiet:
        said = [line for line in planned[:index] if line.startswith("echo ")]
        assert said, f"nothing said before {planned[index]!r}"
    first_quiet = quiet[0]
    assert any("installing" in line for line in planned[:first_quiet])
