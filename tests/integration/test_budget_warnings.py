"""Budgets that warn, through real `swarmdeck` processes and the fake server's scripted
usage: once at 80 % (the owner's transcript, the progress on stderr, `sessions ls`, the
model's next prompt), then the run ends `budget_exhausted` at 100 %, on a tree of three
sessions and on a dispatch whose verdict keeps the partial result."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.testing.fake_llm import FakeLLM
from tests.conftest import run_cli, write_provider

# Every turn reports 1,000 tokens, so the spend crosses 80 % and 100 % of a budget at known
# turns, whatever the prompts weigh.
USAGE = {"input": 900, "output": 100}
LOOK = {
    "text": "Looking.",
    "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}],
    "usage": USAGE,
}
SPAWN_TWO = {
    "text": "Two helpers.",
    "tool_calls": [
        {"name": "spawn_agent", "arguments": {"task": "HELPER one: read the code"}},
        {"name": "spawn_agent", "arguments": {"task": "HELPER two: read the code"}},
    ],
    "usage": USAGE,
}
WAIT = {
    "text": "Waiting.",
    "tool_calls": [{"name": "wait_for_agents", "arguments": {"timeout": 60}}],
    "usage": USAGE,
}
PARTIAL = (
    'So far. <!--SWARMDECK_RESULT_BEGIN-->{"facts": [{"fact": "main returns 42", '
    '"file_line": "app.py:2"}], "truncated": true, "more_in": ["README.md"]}'
    "<!--SWARMDECK_RESULT_END-->"
)
SCRIPT = {
    "scenarios": [
        {"match": "TREE", "turns": [SPAWN_TWO, WAIT, {"text": "done", "usage": USAGE}]},
        {"match": "HELPER", "turns": [LOOK] * 40},
        # Turn 1 crosses 80 % of 2,500 tokens; turn 2 writes what it has, then looks on.
        {"match": "CLOSE", "turns": [LOOK, LOOK, {"text": "Done, in time.", "usage": USAGE}]},
        {"match": "SPEND", "turns": [LOOK, LOOK, {**LOOK, "text": PARTIAL}, *[LOOK] * 5]},
    ]
}
WARNING_LINE = re.compile(r"budget (\d+)% of this session's max_tokens budget spent")


@pytest.fixture
def fake(sd_home: Path) -> Any:
    with FakeLLM(SCRIPT) as server:
        write_provider(sd_home, "fake", server.openai_base_url)
        yield server


@pytest.fixture(params=["openai", "anthropic"])
def either_wire(request: pytest.FixtureRequest, sd_home: Path, fake: FakeLLM) -> FakeLLM:
    """The fake server behind the provider `fake`, on one wire format or the other."""
    url = fake.anthropic_base_url if request.param == "anthropic" else fake.openai_base_url
    write_provider(sd_home, "fake", url, kind=request.param)
    return fake


def _show(home: Path, sid: str) -> dict[str, Any]:
    res = run_cli(home, "sessions", "show", sid, "--json")
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)


def _kinds(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in doc["events"] if e["kind"] == kind]


def _noted_requests(fake: FakeLLM) -> list[str]:
    """The first user message of each request whose conversation carries the budget's note."""
    found = []
    for r in fake.requests:
        messages = (r.body or {}).get("messages") or []
        if any("[budget]" in str(m.get("content")) for m in messages):
            found.append(next(str(m["content"]) for m in messages if m["role"] == "user"))
    return found


def test_a_tree_is_warned_once_at_80_and_stopped_at_100(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    res = run_cli(sd_home, "run", "TREE job", "-m", "fake", "-C", str(workdir),
                  "--max-tokens", "10000", timeout=120)  # fmt: skip
    assert res.code == 3, res.stderr
    assert "budget_exhausted" in res.stderr
    # One line in the progress of the run, however many sessions crossed 80 %.
    percents = [int(p) for p in WARNING_LINE.findall(res.stderr)]
    assert len(percents) == 1 and 80 <= percents[0] < 100, res.stderr
    rows = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    assert len(rows) == 3 and {r["status"] for r in rows} == {"budget_exceeded"}
    [root] = [r for r in rows if r["parent_id"] is None]
    assert root["budget_warning"] == f"max_tokens {percents[0]}%"
    doc = _show(sd_home, root["id"])
    [warning] = _kinds(doc, "budget_warning")
    assert warning["payload"]["limit"] == 10000 and warning["payload"]["owner"] == root["id"]
    assert doc["usage"]["turns"] + sum(
        _show(sd_home, r["id"])["usage"]["turns"] for r in rows if r is not root
    ) in range(10, 13)  # stopped at the first boundary at or past 10,000 tokens
    # Each session told its model at most once; a helper that went on read the note.
    for row in rows:
        assert len(_kinds(_show(sd_home, row["id"]), "budget_note")) <= 1
    assert any(
        task.split("## Your task\n\n")[-1].startswith("HELPER") for task in _noted_requests(fake)
    )


def test_dispatch_warns_then_ends_budget_exhausted_with_the_partial_result(
    sd_home: Path, workdir: Path, either_wire: FakeLLM
) -> None:
    fake = either_wire
    res = run_cli(sd_home, "dispatch", "--provider", "fake", "--mode", "explore",
                  "--workdir", str(workdir), "--task", "SPEND it", "--max-tokens", "2500",
                  timeout=120)  # fmt: skip
    assert res.code == 3, res.stderr
    verdict = json.loads(res.stdout.splitlines()[-1])
    assert (verdict["verdict"], verdict["reason"], verdict["steps"]) == (
        "budget_exhausted",
        "budget",
        3,
    )
    assert verdict["schema_version"] == "3"
    assert verdict["result"]["facts"] == [{"fact": "main returns 42", "file_line": "app.py:2"}]
    assert [int(p) for p in WARNING_LINE.findall(res.stderr)] == [80], res.stderr
    # The note reached the third request, and only the third.
    assert len(_noted_requests(fake)) == 1
    assert WARNING_LINE.search(Path(verdict["log_path"]).read_text())
    doc = _show(sd_home, verdict["session_id"])
    assert len(_kinds(doc, "budget_warning")) == len(_kinds(doc, "budget_note")) == 1


def test_sessions_ls_marks_a_warned_session(sd_home: Path, workdir: Path, fake: FakeLLM) -> None:
    # 2,000 of 2,400 tokens after two turns: warned; the third turn ends the session.
    res = run_cli(sd_home, "run", "CLOSE it", "-m", "fake", "-C", str(workdir),
                  "--max-tokens", "2400", timeout=120)  # fmt: skip
    assert res.code == 0, res.stderr
    assert [int(p) for p in WARNING_LINE.findall(res.stderr)] == [83], res.stderr
    [row] = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    assert (row["status"], row["budget_warning"]) == ("completed", "max_tokens 83%")
    table = run_cli(sd_home, "sessions", "ls", COLUMNS="80").stdout
    assert "completed ⚠" in table and "⚠: 80 % of a budget" in table, table
    assert max(len(line) for line in table.splitlines()) <= 80
