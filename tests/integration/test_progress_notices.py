"""Retries, backoffs and cooldowns are visible where a user looks: each is a `notice` entry
of the transcript with its reason and its wait, shown in the stderr progress, in run.log
and by `sessions show`; progress lines carry their time. And `run` sitting at ask_user
says how to answer, and takes the answer from a terminal on stdin."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

from swarmdeck.testing.fake_llm import FakeLLM
from tests.conftest import Store, cli_env, run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    finish,
    open_catalog,
    popen_cli,
    status_is,
    text,
    tool_results,
    wait_for,
)

TIMED = re.compile(r"^\d\d:\d\d:\d\d ")


def test_retries_and_cooldowns_show_in_progress_run_log_and_sessions_show(
    store: Store, sd_home: Path, workdir: Path
) -> None:
    script = {
        "scenarios": [
            {
                "turns": [
                    {"text": "x", "fault": {"status": 503, "times": 1}},
                    {"text": "y", "fault": {"status": 429, "retry_after": 1, "times": 1}},
                    {"text": "done"},
                ]
            }
        ]
    }
    # The first turn fails once with a 503; the second (after a tool call) once with a 429.
    script["scenarios"][0]["turns"] = [
        {
            "text": "looking",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}],
            "fault": {"status": 503, "times": 1},
        },
        {"text": "it returns 42", "fault": {"status": 429, "retry_after": 1, "times": 1}},
    ]
    with FakeLLM(script) as fake:
        write_provider(sd_home, "fake", fake.openai_base_url)
        args = ["dispatch", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir)]
        res = run_cli(sd_home, *args, "--task", "what does main return?", timeout=120)
    started, verdict = (json.loads(line) for line in res.stdout.splitlines())
    assert verdict["steps"] == 2, res.stderr
    notices = [e for e in open_catalog().events(started["session_id"]) if e.kind == "notice"]
    assert [(n.payload["what"], n.payload["attempt"]) for n in notices] == [
        ("retry", 1),
        ("cooldown", 1),
    ]
    assert "temporary failure (503)" in notices[0].payload["reason"]
    assert notices[0].payload["wait_s"] > 0
    assert (
        notices[1].payload["wait_s"] == 1 and "rate limited (429)" in notices[1].payload["reason"]
    )

    retry_line = re.compile(r"\d\d:\d\d:\d\d wait +retrying in \d+\.\ds \(attempt 2 of 5\): .*503")
    cool_line = re.compile(r"\d\d:\d\d:\d\d wait +cooling down for 1\.0s \(attempt 2 of 5\): .*429")
    log = Path(started["log_path"]).read_text()
    shown = run_cli(sd_home, "sessions", "show", started["session_id"])
    for where, out in {"stderr": res.stderr, "run.log": log, "sessions show": shown.stdout}.items():
        assert retry_line.search(out), (where, out)
        assert cool_line.search(out), (where, out)
    # Every progress line carries its time, the runner's own notes too.
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert lines and all(TIMED.match(line) for line in lines), res.stderr
    assert all(TIMED.match(line) for line in log.splitlines() if line.strip()), log


def asks_a_color(home: Path, fake_llm: FakeLLM) -> None:
    """A provider whose model asks the user a question, then repeats the answer."""
    write_provider(home, "fake", fake_llm.openai_base_url)
    question = calls(call("ask_user", question="which color?"))
    fake_llm.set_script(
        Scripted({"pick": Agent([question, lambda req: text("you said " + tool_results(req)[-1])])})
    )


def test_run_at_ask_user_says_how_to_answer(sd_home: Path, workdir: Path, fake_llm) -> None:
    asks_a_color(sd_home, fake_llm)
    run = popen_cli(sd_home, "run", "pick a color", "-m", "fake", "-C", str(workdir))
    catalog = open_catalog()
    try:
        sid = wait_for(lambda: next(iter(catalog.list_sessions()), None), what="the session").id
        wait_for(status_is(catalog, sid, "input_required"), what="the question")
        res = run_cli(sd_home, "sessions", "answer", sid, "green")
        assert res.code == 0, res.stderr
        code, out, err = finish(run)
    finally:
        run.kill()
    assert code == 0, err
    assert f'answer with `swarmdeck sessions answer {sid} "..."`' in err
    assert out.strip() == "you said the user answered: green"


def test_run_at_ask_user_reads_the_answer_from_a_terminal(
    sd_home: Path, workdir: Path, fake_llm
) -> None:
    asks_a_color(sd_home, fake_llm)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "swarmdeck",
            "run",
            "pick a color",
            "-m",
            "fake",
            "-C",
            str(workdir),
        ],
        env=cli_env(sd_home),
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    os.close(slave)
    try:
        err = ""
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        while "type your answer" not in err:
            assert time.monotonic() < deadline and proc.poll() is None, err
            # Raw reads: a buffered readline could keep the line select waits for.
            ready, _, _ = select.select([proc.stderr.fileno()], [], [], 0.5)
            if ready:
                err += os.read(proc.stderr.fileno(), 65536).decode()
        os.write(master, b"purple\n")
        out, rest = proc.communicate(timeout=60)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err + rest
    assert out.strip() == "you said the user answered: purple"
    assert "Traceback" not in rest
