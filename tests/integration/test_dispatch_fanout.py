"""Fanout through the CLI: the parallel limit, per-provider limits, a killed worker, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.fake_llm import FakeLLM, RecordedRequest
from tests.conftest import cli_env, run_cli, write_provider

LATENCY = 0.4
RESULT = RESULT_EXAMPLES["explore"][0]
TWO_TURNS = {
    "scenarios": [
        {
            "match": "SLOW",
            "turns": [
                {"text": "Looking.", "tool_calls": [{"name": "list_dir", "arguments": {}}]},
                {"text": "Still thinking.", "delay": 120},
            ],
        },
        {
            "turns": [
                {"text": "Looking.", "tool_calls": [{"name": "list_dir", "arguments": {}}]},
                {
                    "text": "Done.",
                    "tool_calls": [{"name": "submit_result", "arguments": {"result": RESULT}}],
                },
            ]
        },
    ]
}


def peak_overlap(requests: list[RecordedRequest], latency: float) -> int:
    """The most requests in flight at once, each taken to last `latency` from its arrival."""
    edges = sorted(
        [(r.timestamp, 1) for r in requests] + [(r.timestamp + latency, -1) for r in requests]
    )
    peak = live = 0
    for _, step in edges:
        live += step
        peak = max(peak, live)
    return peak


@pytest.mark.timeout(300)  # its own waits allow more than the suite's 120 s
def test_parallel_and_provider_limits(sd_home: Path, workdir: Path, tmp_path: Path) -> None:
    with FakeLLM(TWO_TURNS, latency=LATENCY) as wide, FakeLLM(TWO_TURNS, latency=LATENCY) as narrow:
        write_provider(sd_home, "wide", wide.openai_base_url)  # concurrency 4 by default
        write_provider(sd_home, "narrow", narrow.openai_base_url, concurrency=1)
        specs = []
        for i in range(8):
            task = tmp_path / f"t{i}.md"
            task.write_text(f"question {i}: what is in this directory?")
            specs += ["--job", f"{'narrow' if i < 3 else 'wide'}:explore:{task}"]
        res = run_cli(
            sd_home, "fanout", "--workdir", str(workdir), "--max-parallel", "3", *specs, timeout=240
        )
        assert res.code == 0, res.stderr[-2000:]
        docs = json.loads(res.stdout)
        assert [d["job"] for d in docs] == specs[1::2]
        assert all(d["verdict"] == "completed" and d["result"] == RESULT for d in docs)
        assert len(wide.requests) == 10 and len(narrow.requests) == 6
        assert wide.max_concurrent <= 3 and narrow.max_concurrent == 1
        # Never more than three jobs' requests in flight across both providers.
        assert peak_overlap(wide.requests + narrow.requests, LATENCY) <= 3
        assert wide.max_concurrent >= 2  # and the jobs did run side by side


def _logged(home: Path, *needles: str) -> bool:
    """True when some run log under the home holds every needle."""
    for log in home.glob("runs/**/*.log"):
        text = log.read_text(errors="replace")
        if all(n in text for n in needles):
            return True
    return False


def dispatch_pids(marker: str) -> list[int]:
    """Pids of `swarmdeck dispatch` processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"dispatch" in argv and any(marker.encode() in a for a in argv):
            found.append(int(entry.name))
    return found


def test_a_killed_worker_gets_a_synthesized_verdict(
    sd_home: Path, workdir: Path, tmp_path: Path
) -> None:
    with FakeLLM(TWO_TURNS) as fake:
        write_provider(sd_home, "fake", fake.openai_base_url)
        slow = tmp_path / "slow-task.md"
        slow.write_text("SLOW: look around")
        fast = tmp_path / "fast-task.md"
        fast.write_text("look around")
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "swarmdeck", "fanout", "--workdir", str(workdir)),
                *("--job", f"fake:explore:{slow}", "--job", f"fake:explore:{fast}"),
            ],
            env=cli_env(sd_home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 120
            # Kill it while its second model turn is under way.
            # Also wait for its first turn's progress line: the log gets it just before
            # stderr does, and the verdict's stderr_tail must show it.
            while not any(
                "SLOW" in json.dumps(r.body) and "Looking." in json.dumps(r.body)
                for r in fake.requests
            ) or not _logged(sd_home, "SLOW", "Looking."):
                assert time.monotonic() < deadline, "the slow job never reached its second turn"
                time.sleep(0.1)
            [pid] = dispatch_pids(str(slow))
            os.kill(pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 3, err[-2000:]
    killed, done = json.loads(out)
    assert killed["job"] == f"fake:explore:{slow}" and killed["synthesized"] is True
    assert (killed["verdict"], killed["parse_state"], killed["exit_code"]) == (
        "error",
        "unavailable",
        137,
    )
    assert "SIGKILL" in killed["reason"] and killed["session_id"]  # taken from its started line
    assert "Looking." in killed["stderr_tail"] and killed["result"] is None
    assert (done["verdict"], done["synthesized"]) == ("completed", False)
    assert err.count('"swarmdeck.started"') == 2


def test_bad_fanout_input_is_exit_2_with_one_error_line(
    sd_home: Path, workdir: Path, tmp_path: Path
) -> None:
    write_provider(sd_home, "fake", "http://127.0.0.1:9/v1")
    task = tmp_path / "t.md"
    task.write_text("change it")
    res = run_cli(
        sd_home,
        "fanout",
        "--workdir",
        str(workdir),
        "--job",
        f"fake:code:{task}",
        "--job",
        f"fake:code:{task}",
    )
    assert res.code == 2
    [line] = res.stdout.splitlines()
    doc: dict[str, Any] = json.loads(line)
    assert doc["type"] == "swarmdeck.error" and "2 code jobs would write to" in doc["error"]
    assert "worktree" in doc["hint"] and len(res.stderr.strip().splitlines()) == 1
