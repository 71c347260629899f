"""A tool that leaves a daemon holding its stdout (it forked and called setsid, so it is
outside the command's process group) does not make `run` print an "Event loop is closed"
traceback after it exits 0. Without the sandbox, where nothing else contains the daemon."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import run_cli, write_provider

DAEMON = (
    "import os, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    time.sleep(3)\n"
    "else:\n"
    "    print('started')\n"
)


def test_a_daemon_holding_a_tools_stdout_leaves_no_traceback(
    sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    shell = {"name": "shell", "arguments": {"argv": [sys.executable, "-c", DAEMON]}}
    fake_llm.set_script({"scenarios": [{"turns": [{"tool_calls": [shell]}, {"text": "done"}]}]})
    res = run_cli(
        sd_home,
        "run",
        "start it",
        "-m",
        "fake",
        "-C",
        str(workdir),
        "--mode",
        "code",
        "--no-sandbox",
        SWARMDECK_SANDBOX="off",
    )
    assert res.code == 0, res.stderr
    assert res.stdout.strip() == "done"
    assert "exit_code: 0 started" in res.stderr  # the tool ran and its output was read
    assert "Traceback" not in res.stderr and "Event loop is closed" not in res.stderr
