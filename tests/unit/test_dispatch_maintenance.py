"""Cleanup of old logs and run directories; live sessions keep theirs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from swarmdeck.dispatch.maintenance import clean_logs, clean_runs


def make_run(runs: Path, name: str, age_days: float) -> Path:
    run = runs / name
    (run / "home").mkdir(parents=True)
    for file in ("run.log", "events.jsonl", "verdict.json", "final.txt", "home/x.log"):
        (run / file).write_text("data")
    stamp = time.time() - age_days * 86_400
    for path in [run, *run.rglob("*")]:
        os.utime(path, (stamp, stamp))
    return run


def test_logs_go_verdicts_stay(tmp_path: Path) -> None:
    old = make_run(tmp_path, "old", 10)
    new = make_run(tmp_path, "new", 1)
    report = clean_logs(tmp_path, 7, 0, set())
    assert sorted(Path(p).name for p in report.removed) == ["events.jsonl", "run.log", "x.log"]
    assert (old / "verdict.json").exists() and (old / "final.txt").exists()
    assert not (old / "run.log").exists() and (new / "run.log").exists()


def test_runs_keep_newest_live_and_dry_run(tmp_path: Path) -> None:
    for i in range(4):
        make_run(tmp_path, f"r{i}", 10 + i)
    assert len(clean_runs(tmp_path, 7, 0, set(), dry_run=True).removed) == 4
    assert len(list(tmp_path.iterdir())) == 4
    report = clean_runs(tmp_path, 7, 1, {"r1"})
    assert sorted(Path(p).name for p in report.removed) == ["r2", "r3"]
    assert report.kept_live == ["r1"] and "kept 1 of live sessions" in report.summary("runs", False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r0", "r1"]
