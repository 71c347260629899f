"""Cleanup under the home's runs/ dir: old logs, or whole old run directories."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from swarmdeck.catalog.records import TERMINAL_STATUSES

DAY_S = 86_400.0
# What `maintain logs` removes: the bulky files. Verdicts and final texts stay.
LOG_NAMES = ("run.log", "events.jsonl")
LOG_SUFFIXES = (".log",)


@dataclass
class CleanupReport:
    """What a cleanup removed (or would remove, in a dry run)."""

    removed: list[str] = field(default_factory=list)
    kept_live: list[str] = field(default_factory=list)
    bytes_freed: int = 0

    def summary(self, what: str, dry_run: bool) -> str:
        """One line for humans."""
        verb = "would remove" if dry_run else "removed"
        live = f"; kept {len(self.kept_live)} of live sessions" if self.kept_live else ""
        return f"{verb} {len(self.removed)} {what} ({self.bytes_freed / 1e6:.1f} MB){live}"


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _newest_mtime(path: Path) -> float:
    times = [path.stat().st_mtime]
    times += [p.stat().st_mtime for p in path.rglob("*") if not p.is_symlink()]
    return max(times)


def run_dirs(runs_dir: Path) -> list[tuple[float, Path]]:
    """Run directories (sessions and fanouts) with their last change, newest first."""
    if not runs_dir.is_dir():
        return []
    found = [(_newest_mtime(p), p) for p in runs_dir.iterdir() if p.is_dir()]
    return sorted(found, reverse=True)


def _candidates(
    runs_dir: Path, older_than_days: float, keep: int, live: set[str]
) -> tuple[list[Path], CleanupReport]:
    """The run directories to clean, and the report that names the live ones kept."""
    cutoff = time.time() - older_than_days * DAY_S
    chosen: list[Path] = []
    kept_live: list[str] = []
    for rank, (mtime, path) in enumerate(run_dirs(runs_dir)):
        if rank < keep or mtime >= cutoff:
            continue
        if path.name in live:  # a session still running (or resumable mid-run) keeps its files
            kept_live.append(path.name)
            continue
        chosen.append(path)
    return chosen, CleanupReport(kept_live=kept_live)


def clean_runs(
    runs_dir: Path, older_than_days: float, keep: int, live: set[str], dry_run: bool = False
) -> CleanupReport:
    """Remove whole run directories older than N days, keeping the newest `keep`."""
    chosen, report = _candidates(runs_dir, older_than_days, keep, live)
    for path in chosen:
        report.bytes_freed += _size(path)
        report.removed.append(str(path))
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
    return report


def clean_logs(
    runs_dir: Path, older_than_days: float, keep: int, live: set[str], dry_run: bool = False
) -> CleanupReport:
    """Remove the log files of runs older than N days; their verdicts and final texts stay."""
    chosen, report = _candidates(runs_dir, older_than_days, keep, live)
    for run in chosen:
        for path in sorted(run.rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            if path.name in LOG_NAMES or path.suffix in LOG_SUFFIXES:
                report.bytes_freed += path.stat().st_size
                report.removed.append(str(path))
                if not dry_run:
                    path.unlink(missing_ok=True)
    return report


def live_session_ids(catalog: object) -> set[str]:
    """Ids of sessions that are not finished (their run directories are in use)."""
    from swarmdeck.catalog.records import STATUSES

    live: set[str] = set()
    for status in STATUSES:
        if status in TERMINAL_STATUSES:
            continue
        live.update(s.id for s in catalog.list_sessions(status=status, limit=100_000))  # type: ignore[attr-defined]
    return live
