"""The environment of the swarmdeck processes a bench starts (workers, dispatches).

A bench measures swarmdeck as an installed package runs: from compiled bytecode (pip
compiles what it installs). A checkout under PYTHONDONTWRITEBYTECODE (some shells and CI
images set it) keeps none for the modules changed since they were last compiled, and every
process then compiles them again: ~0.16 s of CPU each (tests/conftest.py), which made a
dispatch's start-up depend on which files had been edited last.
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path

import swarmdeck

BYTECODE_ENV = "PYTHONDONTWRITEBYTECODE"


def child_env() -> dict[str, str]:
    """This process's environment without SWARMDECK_ settings, free to keep bytecode, with
    swarmdeck's modules compiled (compileall skips those already fresh)."""
    compileall.compile_dir(Path(swarmdeck.__file__).parent, quiet=1)
    return {
        k: v for k, v in os.environ.items() if not k.startswith("SWARMDECK_") and k != BYTECODE_ENV
    }
