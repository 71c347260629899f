"""Limits from the command line, through real `swarmdeck` processes: `--timeout` in both
forms of `run`, the token and cost budgets and the child limit of `run` and `dispatch`, and
the provider settings `provider add` can now write."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarmdeck.testing.fake_llm import FakeLLM
from tests.conftest import CliResult, run_cli, write_provider

LOOK = {"text": "Looking.", "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}
SPAWN = {
    "text": "Delegating.",
    "tool_calls": [{"name": "spawn_agent", "arguments": {"task": "CHILD: count the files"}}],
}
SCRIPT = {
    "scenarios": [
        {"match": "HANG", "turns": [{"text": "thinking", "delay": 120}]},
        {"match": "LOOP", "turns": [LOOK] * 6},
        {"match": "SPAWN", "turns": [SPAWN, {"text": "No helper, then."}]},
        {"match": "CHILD", "turns": [{"text": "3 files."}]},
    ]
}


@pytest.fixture
def fake(sd_home: Path) -> Any:
    with FakeLLM(SCRIPT) as server:
        write_provider(sd_home, "fake", server.openai_base_url)
        # A provider key and model that genai-prices knows, served by the fake server.
        write_provider(sd_home, "openai", server.openai_base_url, model="gpt-4.1")
        yield server


def sessions(home: Path) -> list[dict[str, Any]]:
    res = run_cli(home, "sessions", "ls", "--json")
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)


def events(home: Path, sid: str) -> list[dict[str, Any]]:
    res = run_cli(home, "sessions", "show", sid, "--json")
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)["events"]


def verdict_of(res: CliResult) -> dict[str, Any]:
    return json.loads(res.stdout.splitlines()[-1])


def test_short_form_run_stops_at_its_timeout_with_124(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    begun = time.monotonic()
    res = run_cli(sd_home, "run", "HANG on", "-m", "fake", "-C", str(workdir), "--timeout", "2")
    took = time.monotonic() - begun
    assert res.code == 124, res.stderr
    assert "timed out after 2s" in res.stderr and "Traceback" not in res.stderr
    assert took < 60  # not the provider's 600 s read timeout
    [row] = sessions(sd_home)
    assert row["status"] == "cancelled"  # stopped, not left running with no one on it
    assert len(fake.requests) <= 1  # the one hanging call (if it got out in 2 s), no retry


def test_short_form_run_out_of_turns_is_not_a_success(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    res = run_cli(sd_home, "run", "LOOP z", "-m", "fake", "-C", str(workdir), "--max-turns", "2")
    assert res.code == 3, res.stderr
    assert "stopped at the step cap: 2 turns" in res.stderr and len(fake.requests) == 2


def test_token_budget_ends_run_and_dispatch(sd_home: Path, workdir: Path, fake: FakeLLM) -> None:
    short = run_cli(sd_home, "run", "LOOP a", "-m", "fake", "-C", str(workdir), "--max-tokens", "1")
    assert short.code == 3, short.stderr
    [row] = sessions(sd_home)
    assert row["status"] == "budget_exceeded"
    base = ["dispatch", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir)]
    res = run_cli(sd_home, *base, "--task", "LOOP b", "--max-tokens", "1", timeout=120)
    assert res.code == 3, res.stderr
    v = verdict_of(res)
    assert (v["verdict"], v["reason"], v["steps"]) == ("budget_exhausted", "budget", 1)
    assert v["tokens"]["input"] + v["tokens"]["output"] >= 1


def test_a_resume_gets_a_fresh_token_allowance(sd_home: Path, workdir: Path, fake: FakeLLM) -> None:
    base = ["dispatch", "--provider", "fake", "--max-tokens", "1"]
    first = run_cli(sd_home, *base, "--mode", "code", "--workdir", str(workdir),
                    "--task", "LOOP d", timeout=120)  # fmt: skip
    v = verdict_of(first)
    assert (v["verdict"], v["steps"]) == ("budget_exhausted", 1), first.stderr
    again = run_cli(sd_home, *base, "--mode", "resume", "--session", v["session_id"],
                    "--task", "go on", timeout=120)  # fmt: skip
    resumed = verdict_of(again)
    # The first run's tokens do not count against this run's allowance: one more turn.
    assert (resumed["verdict"], resumed["steps"]) == ("budget_exhausted", 1), again.stderr


def test_cost_budget_needs_prices_and_then_holds(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    base = ["dispatch", "--mode", "explore", "--workdir", str(workdir), "--task", "LOOP c"]
    refused = run_cli(sd_home, *base, "--provider", "fake", "--max-cost", "1")
    assert refused.code == 2 and "no prices are known for fake:scripted" in refused.stderr
    assert json.loads(refused.stdout)["type"] == "swarmdeck.error"
    assert len(refused.stderr.strip().splitlines()) == 1 and fake.requests == []
    zero = run_cli(sd_home, *base, "--provider", "openai", "--max-cost", "0")
    assert zero.code == 2 and "--max-cost" in zero.stderr
    res = run_cli(sd_home, *base, "--provider", "openai", "--max-cost", "0.000001", timeout=120)
    assert res.code == 3, res.stderr
    v = verdict_of(res)
    assert (v["verdict"], v["steps"]) == ("budget_exhausted", 1) and v["cost_usd"] > 0.000001


def test_child_limit_reaches_the_session(sd_home: Path, workdir: Path, fake: FakeLLM) -> None:
    res = run_cli(
        sd_home, "run", "SPAWN one", "-m", "fake", "-C", str(workdir), "--max-children", "0"
    )
    assert res.code == 0, res.stderr
    [row] = sessions(sd_home)  # no child was made
    spawned = [e for e in events(sd_home, row["id"]) if e["kind"] == "tool_result"]
    assert "child limit: at most 0 live sub-agents" in spawned[0]["payload"]["content"]


def test_limits_are_in_the_dry_run_and_refused_when_negative(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    base = ["dispatch", "--provider", "fake", "--mode", "explore", "--workdir", str(workdir)]
    dry = run_cli(sd_home, *base, "--task", "t", "--dry-run", "--max-turns", "7",
                  "--max-tokens", "500", "--max-children", "2")  # fmt: skip
    assert dry.code == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert (doc["step_cap"], doc["budget"], doc["max_children"]) == (7, {"max_tokens": 500}, 2)
    old_name = run_cli(sd_home, *base, "--task", "t", "--dry-run", "--max-steps", "9")
    assert json.loads(old_name.stdout)["step_cap"] == 9  # the hidden old spelling still works
    for flag, value in (("--max-tokens", "0"), ("--max-children", "-1"), ("--max-turns", "0")):
        bad = run_cli(sd_home, *base, "--task", "t", flag, value)
        assert bad.code == 2 and flag in bad.stderr, (flag, bad.stderr)
        assert json.loads(bad.stdout)["type"] == "swarmdeck.error"
    assert fake.requests == []


def test_provider_add_sets_windows_timeout_and_concurrency(sd_home: Path) -> None:
    help_text = " ".join(run_cli(sd_home, "provider", "add", "--help").stdout.split())
    assert "llama.cpp" in help_text and "--concurrency 1" in help_text
    res = run_cli(
        sd_home, "provider", "add", "llama", "--base-url", "http://127.0.0.1:8080/v1",
        "--model", "qwen", "--no-needs-key", "--concurrency", "1", "--context-tokens", "8192",
        "--output-tokens", "2048", "--timeout", "90",
    )  # fmt: skip
    assert res.code == 0, res.stderr
    doc = yaml.safe_load(Path(json.loads(res.stdout)["file"]).read_text())
    assert (doc["concurrency"], doc["context_tokens"], doc["output_tokens"], doc["timeout_s"]) == (
        1,
        8192,
        2048,
        90.0,
    )
    shown = json.loads(run_cli(sd_home, "provider", "show", "llama").stdout)
    assert (shown["context_tokens"], shown["timeout_s"]) == (8192, 90.0)
    bad = run_cli(
        sd_home, "provider", "add", "llama2", "--base-url", "http://127.0.0.1:8080/v1",
        "--model", "qwen", "--context-tokens", "0",
    )  # fmt: skip
    assert bad.code == 2 and "--context-tokens" in bad.stderr


def test_run_help_states_its_limit_and_the_first_byte_timeout(sd_home: Path) -> None:
    from swarmdeck.dispatch.settings import DEFAULT_TIMEOUT_S
    from swarmdeck.models.registry import FIRST_BYTE_TIMEOUT_S

    help_text = " ".join(run_cli(sd_home, "run", "--help", COLUMNS="200").stdout.split())
    assert f"default {DEFAULT_TIMEOUT_S:g}" in help_text
    assert f"after {FIRST_BYTE_TIMEOUT_S:g} s without a first byte" in help_text
    assert "first_byte_timeout_s" in help_text


def test_run_against_an_endpoint_that_never_answers_ends_without_timeout(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    # No --timeout: each request's first-byte timeout ends the hanging calls, the retries
    # run out, and the run fails saying why.
    write_provider(sd_home, "stuck", fake.openai_base_url, first_byte_timeout_s=0.5, max_attempts=2)
    begun = time.monotonic()
    res = run_cli(sd_home, "run", "HANG on", "-m", "stuck", "-C", str(workdir))
    assert time.monotonic() - begun < 60
    assert res.code not in (0, 124), res.stderr
    assert "sent no byte of an answer within 0.5s" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
