"""Tokens when a provider's stream carries no usage (llama.cpp): estimated, marked as such
in the usage ledger, counted against token budgets, and shown "(estimated)" by `usage`
and `sessions show`. On both stores, through the real SDK and CLI."""

from __future__ import annotations

import json
from pathlib import Path

from swarmdeck import AgentSpec, Swarm
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.config import load_settings
from tests.conftest import Store, run_cli, write_provider

LOOK = {"name": "list_dir", "arguments": {"path": "."}}


def quiet_server_script(turns: int) -> dict:
    """Every turn streams without usage; the last one answers."""
    body = [{"text": "looking", "tool_calls": [LOOK], "fault": {"omit_usage": True}}] * (turns - 1)
    return {"scenarios": [{"turns": [*body, {"text": "done", "fault": {"omit_usage": True}}]}]}


def test_usage_without_counts_is_estimated_and_shown_so(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "local", fake_llm.openai_base_url)
    fake_llm.set_script(quiet_server_script(3))
    res = run_cli(sd_home, "run", "look around", "-m", "local", "-C", str(workdir))
    assert res.code == 0, res.stderr
    usage = json.loads(run_cli(sd_home, "usage", "--json").stdout)
    assert usage["turns"] == 3 and usage["estimated_turns"] == 3
    assert usage["tokens"]["input"] > 0 and usage["tokens"]["output"] > 0
    assert usage["by_model"]["local:scripted"]["estimated_turns"] == 3
    table = run_cli(sd_home, "usage")
    assert "(estimated)" in table.stdout and "token per 4 characters" in table.stderr
    sid = Catalog.open(load_settings().store_url).list_sessions()[0].id
    shown = run_cli(sd_home, "sessions", "show", sid)
    [tokens] = [line for line in shown.stdout.splitlines() if line.startswith("turns 3 ·")]
    assert tokens.endswith("(estimated)"), shown.stdout
    doc = json.loads(run_cli(sd_home, "sessions", "show", sid, "--json").stdout)
    assert doc["usage"]["estimated_turns"] == 3


def test_reported_usage_is_not_marked(sd_home: Path, workdir: Path, fake_llm) -> None:
    write_provider(sd_home, "local", fake_llm.openai_base_url)
    fake_llm.set_script({"scenarios": [{"turns": [{"text": "done"}]}]})
    assert run_cli(sd_home, "run", "hi", "-m", "local", "-C", str(workdir)).code == 0
    usage = json.loads(run_cli(sd_home, "usage", "--json").stdout)
    assert usage["estimated_turns"] == 0 and usage["tokens"]["input"] > 0
    assert "estimated" not in run_cli(sd_home, "usage").stdout


async def test_estimated_tokens_count_against_a_token_budget(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "local", fake_llm.openai_base_url)
    fake_llm.set_script(quiet_server_script(40))
    async with Swarm() as swarm:
        spec = AgentSpec("local", budget={"max_tokens": 3000})
        session = await swarm.start("look around", spec, workdir=workdir)
        outcome = await session.result(timeout=60)
        totals = swarm.host.catalog.usage_totals([session.id])
    assert outcome.status == "budget_exceeded", outcome
    assert "max_tokens" in (outcome.error or "")
    assert totals.estimated_turns == totals.turns < 40
    assert totals.input + totals.output >= 3000
