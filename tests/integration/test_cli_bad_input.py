"""Bad input through real `swarmdeck` processes: an unusable home or store, a bad fake-llm
script or port, and values that must be refused. Each is exit 2 with one line that says
what to do (never exit 1 "internal error"), and nothing already stored is lost."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from swarmdeck.secrets.store import CredentialStore
from swarmdeck.testing.fake_llm import FakeLLM
from tests.conftest import CliResult, Store, in_parallel, run_cli, write_provider

KEY = "sk-first-key-0123456789abcdef"
ANSWER = {"scenarios": [{"turns": [{"text": "Done."}]}]}


def one_line_exit_2(res: CliResult, needle: str) -> None:
    """The refusal every case must give: exit 2, one line on stderr naming the problem."""
    assert res.code == 2, (res.code, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("swarmdeck: error: "), res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr
    assert needle in res.stderr, res.stderr


@pytest.fixture
def fake(sd_home: Path) -> Iterator[FakeLLM]:
    with FakeLLM(ANSWER) as server:
        write_provider(sd_home, "fake", server.openai_base_url)
        yield server


def test_corrupt_store_is_refused_and_left_as_it_was(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    store = sd_home / "swarmdeck.sqlite"
    store.write_bytes(b"not a database, but somebody's data\n" * 100)
    before = store.read_bytes()
    for args in (["sessions", "ls"], ["run", "t", "-m", "fake", "-C", str(workdir)]):
        one_line_exit_2(run_cli(sd_home, *args), "is not a SQLite database")
    base = ["--provider", "fake", "--mode", "explore", "--workdir", str(workdir), "--task", "t"]
    planner = run_cli(sd_home, "dispatch", *base)
    one_line_exit_2(planner, "is not a SQLite database")
    [line] = planner.stdout.splitlines()  # the contract's error line, not a traceback
    assert json.loads(line)["type"] == "swarmdeck.error"
    assert store.read_bytes() == before and fake.requests == []


def test_store_that_is_a_directory_and_home_that_is_a_file(
    sd_home: Path, tmp_path: Path, workdir: Path
) -> None:
    (sd_home / "swarmdeck.sqlite").mkdir()
    one_line_exit_2(run_cli(sd_home, "sessions", "ls"), "is a directory, not a SQLite file")
    elsewhere = tmp_path / "store-dir"
    elsewhere.mkdir()
    res = run_cli(sd_home, "sessions", "ls", SWARMDECK_STORE=f"sqlite:///{elsewhere}")
    one_line_exit_2(res, f"the store {elsewhere} is a directory")
    home_file = tmp_path / "home-file"
    home_file.write_text("my notes\n")
    for args in (["sessions", "ls"], ["run", "t", "-m", "fake", "-C", str(workdir)]):
        one_line_exit_2(run_cli(home_file, *args), f"the swarmdeck home {home_file} is not a")
    assert home_file.read_text() == "my notes\n"


def test_unreachable_postgres_names_no_password(sd_home: Path) -> None:
    url = "postgresql://sd:hunter2-secret@127.0.0.1:9/sd"
    res = run_cli(sd_home, "sessions", "ls", SWARMDECK_STORE=url)
    one_line_exit_2(res, "cannot open the store postgresql://sd:***@127.0.0.1:9/sd")
    assert "hunter2" not in res.stderr
    in_query = "postgresql://sd@127.0.0.1:9/sd?password=hunter3-secret&sslmode=disable"
    res = run_cli(sd_home, "sessions", "ls", SWARMDECK_STORE=in_query)
    one_line_exit_2(res, "cannot open the store postgresql://sd@127.0.0.1:9/sd:")
    assert "hunter3" not in res.stderr


def _read_only_wrapper(path: Path) -> tuple[str, ...]:
    """A command prefix that runs a process with `path` read-only (root ignores modes)."""
    bwrap = shutil.which("bwrap")
    if bwrap:
        wrapper = (bwrap, "--bind", "/", "/", "--ro-bind", str(path), str(path))
        wrapper += ("--dev", "/dev", "--proc", "/proc")
        probe = subprocess.run([*wrapper, "true"], capture_output=True)
        if probe.returncode == 0:
            return wrapper
    if os.geteuid() != 0:
        path.chmod(0o555)
        return ()
    pytest.skip("needs bubblewrap (or a non-root user) to make a directory read-only")


def _leave_side_files(store_file: Path, *, crashed: bool) -> None:
    """Leave the SQLite store as a clean close does (no -wal, -shm) or as a crash or an
    os._exit does (both left beside it, so a read-only home can still open it to read)."""
    code = "import sqlite3, os, sys; c = sqlite3.connect(sys.argv[1]); "
    code += "c.execute('select count(*) from sqlite_master').fetchall(); "
    code += "os._exit(0)" if crashed else "c.close()"
    subprocess.run([sys.executable, "-c", code, str(store_file)], check=True)
    left = {s for s in ("-wal", "-shm") if Path(f"{store_file}{s}").exists()}
    assert left == ({"-wal", "-shm"} if crashed else set()), left


@pytest.mark.parametrize("crashed", [False, True], ids=["closed", "crashed"])
def test_read_only_home_refuses_writes_and_keeps_what_is_stored(
    store: Store, sd_home: Path, workdir: Path, fake: FakeLLM, crashed: bool
) -> None:
    first = run_cli(sd_home, "run", "t", "-m", "fake", "-C", str(workdir))
    assert first.code == 0, first.stderr
    [session] = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    assert run_cli(sd_home, "key", "set", "openai", stdin_text=KEY).code == 0
    if not store.is_postgres:
        _leave_side_files(sd_home / "swarmdeck.sqlite", crashed=crashed)
    elif crashed:
        pytest.skip("side files are SQLite's")
    task = workdir.parent / "task.md"
    task.write_text("look around")
    ro = _read_only_wrapper(sd_home)
    job = ["fanout", "--job", f"fake:explore:{task}", "--workdir", str(workdir)]
    calls = {
        "fanout": partial(run_cli, sd_home, *job, wrapper=ro),
        "run": partial(run_cli, sd_home, "run", "t2", "-m", "fake", "-C", str(workdir), wrapper=ro),
        "send": partial(run_cli, sd_home, "sessions", "send", session["id"], "more", wrapper=ro),
        "key": partial(
            run_cli, sd_home, "key", "set", "openai", stdin_text="sk-other-9876543210", wrapper=ro
        ),
    }
    try:
        results = in_parallel(calls)
    finally:
        sd_home.chmod(0o755)
    fanout, run, send, key = (results[name] for name in ("fanout", "run", "send", "key"))
    one_line_exit_2(key, "cannot store the key in")
    one_line_exit_2(fanout, "cannot create the fanout directory")
    assert json.loads(fanout.stdout)["type"] == "swarmdeck.error"
    if store.is_postgres:
        # The store is the server's: only the run's own directory needs the home.
        one_line_exit_2(run, "cannot create the run directory")
        assert send.code == 2 and "has ended" in send.stderr  # the store answered
    else:
        one_line_exit_2(run, "cannot be written")
        # Left by a crash, the side files let the store be read: the session has ended.
        one_line_exit_2(send, "has ended" if crashed else "cannot be written")
    assert len(fake.requests) == 1  # the refused run sent nothing
    assert CredentialStore(sd_home / "credentials").get("openai") == KEY
    after = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    assert [s["id"] for s in after] == [session["id"]]


def test_fake_llm_bad_script_or_port(sd_home: Path, tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("scenarios:\n  - turns:\n      - txt: hello\n")
    res = run_cli(sd_home, "fake-llm", "--script", str(typo))
    one_line_exit_2(res, f"{typo}: scenarios.0.turns.0.txt: Extra inputs are not permitted")
    broken = tmp_path / "broken.yaml"
    broken.write_text("scenarios: [\n")
    one_line_exit_2(run_cli(sd_home, "fake-llm", "--script", str(broken)), "not valid YAML")
    good = tmp_path / "good.yaml"
    good.write_text("scenarios: []\n")
    one_line_exit_2(
        run_cli(sd_home, "fake-llm", "--script", str(good), "--port", "99999"), "--port"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        res = run_cli(sd_home, "fake-llm", "--script", str(good), "--port", port)
    one_line_exit_2(res, f"cannot listen on 127.0.0.1:{port}")


def test_values_that_must_be_refused(sd_home: Path, workdir: Path, fake: FakeLLM) -> None:
    short = ["-m", "fake", "-C", str(workdir)]
    cases = {
        "empty task": (["run", "", *short], "the task is empty"),
        "blank task": (["run", "  \n", *short], "the task is empty"),
        "negative turns": (["run", "t", *short, "--max-turns", "-1"], "--max-turns"),
        "negative turns, old name": (["run", "t", *short, "--max-steps", "-1"], "--max-steps"),
        "two caps": (["run", "t", *short, "--max-turns", "2", "--max-steps", "3"], "disagree"),
        "negative wait": (["worker", "--once", "--max-seconds", "-1"], "--max-seconds"),
        "empty message": (["sessions", "send", "abc", ""], "the message is empty"),
        "empty answer": (["sessions", "answer", "abc", " "], "the answer is empty"),
        "unknown status": (["sessions", "ls", "--status", "done"], "unknown status 'done'"),
        "zero limit": (["sessions", "ls", "--limit", "0"], "--limit"),
    }
    results = in_parallel(
        {name: partial(run_cli, sd_home, *args) for name, (args, _) in cases.items()}
    )
    for name, (_, needle) in cases.items():
        assert results[name].code == 2, (name, results[name].stderr)
        one_line_exit_2(results[name], needle)
    assert fake.requests == []


def test_key_set_refuses_two_lines_and_keeps_the_old_key(sd_home: Path) -> None:
    assert run_cli(sd_home, "key", "set", "openai", stdin_text=KEY + "\n").code == 0
    res = run_cli(sd_home, "key", "set", "openai", stdin_text="sk-new-0123456789\nsecond line\n")
    one_line_exit_2(res, "stdin holds 2 lines")
    assert "sk-new" not in res.stderr + res.stdout and "second line" not in res.stderr
    assert CredentialStore(sd_home / "credentials").get("openai") == KEY


def test_status_filter_matching_nothing_says_so(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    assert run_cli(sd_home, "run", "t", "-m", "fake", "-C", str(workdir)).code == 0
    res = run_cli(sd_home, "sessions", "ls", "--status", "failed")
    assert res.code == 0 and "no failed sessions" in res.stderr
    assert "demo" not in res.stderr
    assert "completed" in run_cli(sd_home, "sessions", "ls", "--status", "completed").stdout
