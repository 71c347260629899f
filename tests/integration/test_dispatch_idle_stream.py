"""The idle timeout counts streamed output as activity: a model that streams a chunk every
2 s for 12 s is not cut by `--idle-timeout 8`; a model that sends nothing still is. The
activity is a touch of the session in the catalog (the session may run in another process
than the one watching it), on both stores, through real `dispatch` processes."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from swarmdeck.testing.fake_llm import FakeLLM
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import open_catalog

STREAMED = "one two three"  # 7 events of the stream, 2 s apart: 12 s
SCRIPT = {
    "scenarios": [
        {"match": "SILENT", "turns": [{"text": "late", "delay": 12}]},
        {"match": "STREAMING", "turns": [{"text": STREAMED, "chunk_delay": 2}]},
    ]
}


def test_streamed_chunks_keep_a_run_alive_and_silence_does_not(
    store: Store, sd_home: Path, workdir: Path
) -> None:
    with FakeLLM(SCRIPT) as fake:
        write_provider(sd_home, "fake", fake.openai_base_url)
        args = ["dispatch", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir)]

        def run(task: str):
            began = time.monotonic()
            res = run_cli(sd_home, *args, "--idle-timeout", "8", "--task", task, timeout=90)
            return res, time.monotonic() - began

        with ThreadPoolExecutor(2) as pool:
            streaming = pool.submit(run, "STREAMING answer")
            silent = pool.submit(run, "SILENT answer")
            (res, took), (cut, _) = streaming.result(), silent.result()

    started, verdict = (json.loads(line) for line in res.stdout.splitlines())
    assert took >= 12, "the stream was not slow: the test proves nothing"
    assert verdict["idle_timed_out"] is False and verdict["reason"] != "idle_timeout", verdict
    record = open_catalog().get_session(started["session_id"])
    assert record.status == "completed" and record.final_text == STREAMED
    # The activity was recorded in the catalog, during the stream, not only at its end.
    assert record.active_at is not None and record.active_at < record.updated_at

    _, cut_verdict = (json.loads(line) for line in cut.stdout.splitlines())
    assert cut.code == 3, cut.stderr
    assert (cut_verdict["idle_timed_out"], cut_verdict["reason"]) == (True, "idle_timeout")
