"""`swarmdeck run` end to end: real CLI process, real SDKs over loopback, real SQLite and
PostgreSQL stores."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import Store, run_cli, write_provider

READ_AND_ANSWER = {
    "scenarios": [
        {
            "turns": [
                {
                    "text": "Reading.",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}],
                },
                {
                    "text": "Writing.",
                    "tool_calls": [
                        {"name": "write_file", "arguments": {"path": "out.txt", "content": "42\n"}}
                    ],
                },
                {"text": "main() returns 42; I wrote out.txt."},
            ]
        }
    ]
}


@pytest.mark.parametrize("kind", ["openai", "anthropic", "openai-responses"])
def test_run_reads_writes_and_answers(
    store: Store, sd_home: Path, workdir: Path, fake_llm, kind: str
) -> None:
    fake_llm.set_script(READ_AND_ANSWER)
    base = fake_llm.anthropic_base_url if kind == "anthropic" else fake_llm.openai_base_url
    write_provider(sd_home, "fake", base, kind=kind)
    res = run_cli(
        sd_home,
        "run",
        "what does main return?",
        "--model",
        "fake:scripted",
        "--workdir",
        str(workdir),
        # The short form only reads unless told (issue 10); this model writes out.txt.
        "--mode",
        "agent",
    )
    assert res.code == 0, res.stderr
    assert res.stdout.strip() == "main() returns 42; I wrote out.txt."
    assert (workdir / "out.txt").read_text() == "42\n"
    assert "read_file" in res.stderr  # progress went to stderr
    # The model saw the file's content in the next request.
    second = fake_llm.requests[1].body
    assert "return 42" in json.dumps(second)
    assert len(fake_llm.requests) == 3

    ls = run_cli(sd_home, "sessions", "ls", "--json")
    sessions = json.loads(ls.stdout)
    assert [s["status"] for s in sessions] == ["completed"]
    show = json.loads(run_cli(sd_home, "sessions", "show", sessions[0]["id"], "--json").stdout)
    kinds = [e["kind"] for e in show["events"]]
    assert kinds == [
        "task",
        "assistant",
        "tool_result",
        "assistant",
        "tool_result",
        "assistant",
        "status",
    ]
    assert show["usage"]["turns"] == 3


def test_transcript_and_wal(sd_home: Path, workdir: Path, fake_llm) -> None:
    fake_llm.set_script(READ_AND_ANSWER)
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    assert run_cli(sd_home, "run", "t", "-m", "fake", "-C", str(workdir)).code == 0
    db = sqlite3.connect(sd_home / "swarmdeck.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    sid = db.execute("select id from sd_sessions").fetchone()[0]
    tail = run_cli(sd_home, "sessions", "tail", sid[:6])
    assert "main() returns 42" in tail.stderr
    assert "completed" in tail.stderr


def test_bad_input_is_one_line_exit_2(sd_home: Path, workdir: Path, tmp_path: Path) -> None:
    cases = [
        (["run", "t", "-m", "nosuch:model", "-C", str(workdir)], "nosuch"),
        (["run", "t", "-m", "openai", "-C", str(tmp_path / "missing")], "workdir does not exist"),
    ]
    write_provider(sd_home, "dead", "http://127.0.0.1:9/v1")
    cases.append((["run", "t", "-m", "dead", "-C", str(workdir)], "cannot reach"))
    for args, needle in cases:
        res = run_cli(sd_home, *args)
        assert res.code == 2, (args, res.stderr)
        assert needle in res.stderr
        assert "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_unreadable_provider_file_is_one_line(sd_home: Path, workdir: Path) -> None:
    (sd_home / "providers").mkdir()
    (sd_home / "providers" / "broken.yaml").write_text(
        "key: broken\nkind: openai\nconcurrency: lots\n"
    )
    res = run_cli(sd_home, "run", "t", "-m", "broken", "-C", str(workdir))
    assert res.code == 2
    assert "broken.yaml" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_missing_key_is_refused(sd_home: Path, workdir: Path, fake_llm) -> None:
    write_provider(sd_home, "keyed", fake_llm.openai_base_url, needs_key=True)
    res = run_cli(sd_home, "run", "t", "-m", "keyed", "-C", str(workdir))
    assert res.code == 2 and "swarmdeck key set keyed" in res.stderr
    assert fake_llm.requests == []
