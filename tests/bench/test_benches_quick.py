"""Every bench in bench/ runs to its end at its `--quick` size, prints its closing line, and
warns of nothing: a change that breaks a bench fails here, not weeks later in a bench run.

Each bench is a test of its own, so xdist spreads them over its workers beside the rest of
the suite. The figures of a quick run mean nothing; only the shape of the closing line is
checked. bench/suite_cpu.py is left out: it is a pytest plugin and a report on what a whole
suite run recorded, not a bench with a size (bench/quick.py, bare_http.py, child_env.py,
fake_server.py, workspace_takeover.py, runner_overhead.py, scale_bare.py and proc_stats.py are
modules the benches share).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import pgcluster

BENCH = Path(__file__).resolve().parents[2] / "bench"
NUMBER = r"\d+(\.\d+)?"

# Each bench's closing line (its docstring names it where it has one goal figure).
CLOSING_LINES = {
    "catalog_calls": rf"catalog / bare driver, geometric mean: {NUMBER}x",
    "concurrency": rf"swarmdeck / same work on bare DBOS: {NUMBER}x",
    "dispatch": rf"fleet path: startup {NUMBER} ms, verdict {NUMBER} ms",
    "edits": r"edits: (?P<ratio>\d+\.\d)x fewer output tokens than whole-file writes",
    "failover": rf"takeover median: {NUMBER} s",
    "long_session": rf"max prompt / window: {NUMBER}%",
    # Tracing's cost is a difference of two timings: noise can make it negative.
    "overhead": rf"with tracing on \(SDK, in-memory exporter\) +[+-]{NUMBER} ms/turn",
    "sandbox": rf"redact 10 KB: .* \({NUMBER}x\)",
    "portal": rf"portal: first page \d+ ms, event \d+ ms, idle {NUMBER} %",
    "scale": rf"scale: \d+ waiting, RSS {NUMBER} MiB, timer p95 {NUMBER} s, "
    rf"message p95 {NUMBER} ms",
    "session_cost": rf"per session: {NUMBER} ms CPU, {NUMBER} statements, {NUMBER} commits",
    "swarm": rf"cached share of input: {NUMBER}%, members' first requests on the shared "
    rf"prefix: {NUMBER}%",
    "system_agents": rf"ratios \d+/10: RSS {NUMBER} .*, engine steps {NUMBER}",
    "tui": rf"CPU share of one core +{NUMBER} % +\(goal: under 2 %\)",
    "tools": r"runtime tokens per turn: demo \d+, \d+ MCP servers \d+ \(eager \d+\)",
    "tui_cancel": rf"`swarmdeck sessions cancel` process +{NUMBER}",
    "wake_cost": rf"per message: {NUMBER} ms CPU, {NUMBER} statements, {NUMBER} commits",
    "workspace": rf"workspace: snapshot {NUMBER} ms, takeover {NUMBER} s",
}
# What a clean run must not print: Python's warnings, asyncio's and aiohttp's complaints
# about what was left open, a traceback.
NOISE = re.compile(r"warning|unclosed|traceback|leaves .* open", re.IGNORECASE)
# Benches that start their own PostgreSQL cluster.
NEEDS_POSTGRES = {"failover"}
QUICK_TIMEOUT_S = 240


def test_every_bench_is_run_here() -> None:
    helpers = {
        "quick",
        "bare_http",
        "child_env",
        "fake_server",
        "suite_cpu",
        "mcp_wide_server",
        "prefix_share",
        "workspace_takeover",
        "runner_overhead",
        "scale_bare",
        "proc_stats",
    }
    benches = {p.stem for p in BENCH.glob("*.py")} - helpers
    assert benches == set(CLOSING_LINES)


@pytest.mark.bench
@pytest.mark.parametrize("name", sorted(CLOSING_LINES))
def test_bench_runs_quick(name: str, tmp_path: Path) -> None:
    if name in NEEDS_POSTGRES and (reason := pgcluster.unavailable_reason()):
        pytest.skip(reason)
    # The bench chooses its own store and home: none of the suite's settings leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMDECK_")}
    if name not in NEEDS_POSTGRES:  # the cluster's socket path must stay short
        env["TMPDIR"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), "--quick"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=QUICK_TIMEOUT_S,
        check=False,
    )
    out = f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, out
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    closing = re.fullmatch(CLOSING_LINES[name], lines[-1]) if lines else None
    assert closing, out
    if name == "edits":  # a count of tokens, not a time: its goal holds at any size
        assert float(closing["ratio"]) >= 20, out
    if name == "scale":  # its figures are read against bare DBOS's, measured in the run
        assert re.search(rf"swarmdeck / bare DBOS: memory per session {NUMBER}x", out), out
    noise = [line for line in proc.stderr.splitlines() if NOISE.search(line)]
    assert not noise, out
