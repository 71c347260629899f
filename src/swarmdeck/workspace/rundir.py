"""Per-run directories: the run's log, its events, and the HOME and tmp its tools see."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from swarmdeck.errors import StoreError, UsageError
from swarmdeck.filemodes import private_dir

# A run id becomes a directory name: no separators, no dot-only names, bounded length.
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class RunDir:
    """One run's directory under the runs dir."""

    path: Path

    @property
    def home(self) -> Path:
        """HOME of the run's tool processes."""
        return self.path / "home"

    @property
    def tmp(self) -> Path:
        """TMPDIR of the run's tool processes."""
        return self.path / "tmp"

    @classmethod
    def create(cls, runs_dir: Path, run_id: str) -> RunDir:
        """Create (or reopen) the directory of `run_id`, its home and tmp, all 0700."""
        if not RUN_ID_RE.match(run_id or ""):
            raise UsageError(
                f"invalid run id {run_id!r}",
                hint="use letters, digits, '.', '_' or '-' (at most 128), no path separators",
            )
        run = cls(Path(runs_dir) / run_id)
        try:
            private_dir(Path(runs_dir))
            for path in (run.path, run.home, run.tmp):
                private_dir(path)
        except OSError as exc:
            raise StoreError(
                f"cannot create the run directory {run.path}: {exc.strerror or exc}",
                "the swarmdeck home (SWARMDECK_HOME) must be a writable directory",
            ) from None
        return run
