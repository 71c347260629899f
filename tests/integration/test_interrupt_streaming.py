"""Ctrl-C while the model is streaming its answer (issue 30, item 13).

The signal lands mid-turn: the run must stop that turn before it leaves (no chunk may reach a
runtime that is already shut down, which printed "a listener of the provider call failed:
... runtime is not started"), say it was interrupted, and never exit 0 as if it completed.
Real processes, a real SIGINT, the fake server streaming on loopback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.config import load_settings
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import Script
from tests.conftest import cli_env, run_cli, write_provider

# One long answer streamed a word every 30 ms: about six seconds of chunks.
STREAM = Script.from_dict(
    {"scenarios": [{"turns": [{"text": "word " * 200, "chunk_delay": 0.03}]}]}
)
NOT_STARTED = "runtime is not started"


@pytest.fixture
def streaming(sd_home: Path):
    with FakeLLM(STREAM) as server:
        write_provider(sd_home, "fake", server.openai_base_url)
        yield server


def _interrupt_mid_stream(args: list[str], home: Path, fake: FakeLLM) -> tuple[int, str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", *args],
        env=cli_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not fake.requests:  # the turn is streaming
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        time.sleep(1.5)  # chunks are arriving, and the session has touched its activity
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err


def _the_session() -> tuple[str, int]:
    catalog = Catalog.open(load_settings().store_url)
    (record,) = catalog.list_sessions()
    kinds = [ev.kind for ev in catalog.events(record.id)]
    return record.status, kinds.count("assistant")


def test_ctrl_c_during_a_streaming_run(sd_home: Path, workdir: Path, streaming: FakeLLM) -> None:
    args = ["run", "--model", "fake:scripted", "--workdir", str(workdir), "--mode", "explore"]
    code, _out, err = _interrupt_mid_stream([*args, "say many words"], sd_home, streaming)
    assert code == 130, err
    assert NOT_STARTED not in err and "listener" not in err and "Traceback" not in err, err
    assert "interrupted by Ctrl-C" in err
    status, answers = _the_session()
    # Stopped where it was: resumable, and the interrupted turn was not recorded as done.
    assert (status, answers) == ("cancelled", 0)
    requests = len(streaming.requests)
    time.sleep(1.0)
    assert len(streaming.requests) == requests == 1  # nothing runs on after the exit
    (sid,) = [line.split()[1].rstrip(":") for line in err.splitlines() if "interrupted by" in line]
    resumed = run_cli(sd_home, "sessions", "resume", sid, timeout=90)
    assert resumed.code == 0, resumed.stderr
    assert resumed.stdout.strip().startswith("word word")


def test_ctrl_c_during_a_streaming_dispatch(
    sd_home: Path, workdir: Path, streaming: FakeLLM
) -> None:
    args = ["dispatch", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir)]
    code, out, err = _interrupt_mid_stream([*args, "--task", "say many words"], sd_home, streaming)
    assert code == 3, err
    assert NOT_STARTED not in err and "listener" not in err and "Traceback" not in err, err
    verdict = json.loads(out.splitlines()[1])
    assert (verdict["reason"], verdict["interrupted"]) == ("interrupted", True)
    status, answers = _the_session()
    assert (status, answers) == ("cancelled", 0)
