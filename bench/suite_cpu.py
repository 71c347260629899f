"""Where the test suite spends CPU: per test, its own process and the processes it started.

Wall times of a parallel run on a shared machine say little (they grow with the load);
CPU time (user + system) is the figure that decides how long `make test` takes on a
CPU-bound 2-core runner. Load this file as a pytest plugin; every test then appends one
JSON line: the xdist worker's own CPU during the test, the CPU of the child processes it
reaped (CLI processes, workers; not the PostgreSQL server, which pg_ctl detaches), the
wall time, and how many `python -m swarmdeck` processes it started.

    SUITE_CPU_OUT=/tmp/cpu.jsonl .venv/bin/pytest -q -n 3 --dist worksteal -p bench.suite_cpu
    python bench/suite_cpu.py /tmp/cpu.jsonl [--top N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

OUT_ENV = "SUITE_CPU_OUT"
DEFAULT_OUT = "suite-cpu.jsonl"
_started = [0]
_popen_init = subprocess.Popen.__init__


def _counting_init(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> None:
    head = [str(a) for a in args[:4]] if isinstance(args, list | tuple) else []
    if "-m" in head and "swarmdeck" in head:
        _started[0] += 1
    _popen_init(self, args, *rest, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    """Count the swarmdeck processes tests start (only when this plugin is loaded)."""
    subprocess.Popen.__init__ = _counting_init  # type: ignore[method-assign]


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator:
    """Measure one test (setup, call and teardown) and append its line."""
    before, started, t0 = _cpu(), _started[0], time.monotonic()
    try:
        return (yield)
    finally:
        after = _cpu()
        row = {
            "id": item.nodeid,
            "self": round(after[0] - before[0], 3),
            "children": round(after[1] - before[1], 3),
            "wall": round(time.monotonic() - t0, 3),
            "cli": _started[0] - started,
        }
        with open(os.environ.get(OUT_ENV, DEFAULT_OUT), "a") as out:
            out.write(json.dumps(row) + "\n")


def summarize(path: Path, top: int) -> None:
    """Print the totals, the split by store, and the files that cost the most CPU."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    total = sum(r["self"] + r["children"] for r in rows)
    print(
        f"{len(rows)} tests, {total / 60:.1f} CPU-minutes "
        f"(test processes {sum(r['self'] for r in rows) / 60:.1f}, "
        f"their children {sum(r['children'] for r in rows) / 60:.1f}); "
        f"{sum(r['cli'] for r in rows)} swarmdeck processes started"
    )
    by_store: dict[str, float] = defaultdict(float)
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0, 0])
    for r in rows:
        cpu = r["self"] + r["children"]
        store = next((s for s in ("postgres", "sqlite") if f"[{s}" in r["id"]), "no store")
        by_store[store] += cpu
        entry = by_file[r["id"].split("::")[0]]
        entry[0] += cpu
        entry[1] += r["children"]
        entry[2] += r["cli"]
        entry[3] += 1
    print("by store: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in by_store.items()))
    print(f"{'CPU s':>8} {'share':>6} {'child s':>8} {'procs':>5} {'tests':>5}  file")
    for name, (cpu, child, cli, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{cpu:8.1f} {100 * cpu / total:5.1f}% {child:8.1f} {cli:5d} {n:5d}  {name}")


def main() -> None:
    """Summarize a run's lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    summarize(args.path, args.top)


if __name__ == "__main__":
    main()
