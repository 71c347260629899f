"""`swarmdeck tui` without textual installed: one line saying how to install it, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import cli_env

# Runs the CLI as if textual were not installed (a None entry hides a module from imports).
WITHOUT_TEXTUAL = (
    "import sys; sys.modules['textual'] = None; sys.argv = ['swarmdeck', 'tui']; "
    "from swarmdeck.cli.app import main; main()"
)


def test_tui_without_textual_says_how_to_install_it(sd_home: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-c", WITHOUT_TEXTUAL],
        env=cli_env(sd_home),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'swarmdeck[tui]'" in lines[0]
    assert "Traceback" not in res.stderr and res.stdout == ""
