"""The suite's processes keep compiled bytecode, whatever the caller's shell says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import BYTECODE_ENV, cli_env


def test_cli_processes_may_write_bytecode(sd_home: Path) -> None:
    # Every CLI process would compile swarmdeck again otherwise (tests/conftest.py).
    env = cli_env(sd_home)
    assert BYTECODE_ENV not in env
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.flags.dont_write_bytecode)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == "0"
    assert not sys.dont_write_bytecode
