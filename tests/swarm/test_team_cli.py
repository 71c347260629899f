"""`swarmdeck team ls|show|save|rm` through the CLI, and a swarm run on an llmcode JSON team
as llmcode's own code wrote it (its coordinator_model, its role models, its prompts)."""

from __future__ import annotations

import json
from pathlib import Path

from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import Agent, Scripted, call, calls
from tests.swarm.support import RESULTS, coordinator, plan_of, prompt_of, report_of, run_swarm
from tests.unit.test_swarm_team import llmcode_team_file


def test_team_commands(sd_home: Path, tmp_path: Path) -> None:
    listed = run_cli(sd_home, "team", "ls", "--json")
    assert listed.code == 0
    assert [(t["name"], t["tier"]) for t in json.loads(listed.stdout)] == [
        ("feature", "packaged"),
        ("review", "packaged"),
    ]
    shown = run_cli(sd_home, "team", "show", "feature")
    assert shown.code == 0
    for needle in ("coder", "tester", "reviewer", "then abort", "1 retries, 5 s apart"):
        assert needle in shown.stdout, shown.stdout
    path = llmcode_team_file(tmp_path)
    saved = run_cli(sd_home, "team", "save", str(path))
    assert saved.code == 0, saved.stderr
    assert json.loads(saved.stdout) == {
        "name": "auditors",
        "path": str(sd_home / "teams/auditors.json"),
    }
    assert "note: security: backend 'tmux' is ignored" in saved.stderr
    assert run_cli(sd_home, "team", "save", str(path)).code == 2  # saved already
    doc = json.loads(run_cli(sd_home, "team", "show", "auditors", "--json").stdout)
    assert doc["tier"] == "user" and doc["coordinator_model"] == "fake"
    assert doc["notes"] == ["security: backend 'tmux' is ignored (members are durable sessions)"]
    removed = run_cli(sd_home, "team", "rm", "auditors")
    assert removed.code == 0 and json.loads(removed.stdout)["removed"] == "auditors"
    for args, needle in (
        (("team", "rm", "review"), "packaged team and cannot be removed"),
        (("team", "rm", "auditors"), "no saved team named 'auditors'"),
        (("team", "show", "ghost"), "no team named 'ghost'"),
    ):
        res = run_cli(sd_home, *args)
        assert res.code == 2 and needle in res.stderr, (args, res.stderr)


def test_a_swarm_on_an_llmcode_team(
    store: Store, sd_home: Path, workdir: Path, tmp_path: Path, fake_llm
) -> None:
    prompts: dict[str, str] = {}

    def security(req: FakeRequest) -> Reply:
        prompts["security"] = prompt_of(req)
        return calls(call("submit_result", result=RESULTS["review"]))

    plan = plan_of(
        {"role": "security", "task": "SEC: audit app.py", "mode": "review"},
        {"role": "docs", "task": "DOCS: read README.md", "mode": "explore"},
    )
    script = Scripted(
        {
            "AUDIT": coordinator(plan),
            "SEC:": Agent([security]),
            "DOCS:": Agent([calls(call("submit_result", result=RESULTS["explore"]))]),
        }
    )
    fake_llm.set_script(script)
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=8)
    team = llmcode_team_file(tmp_path)
    # No --model: the team's coordinator_model runs the coordinator.
    res = run_swarm(sd_home, "AUDIT the app", "-C", str(workdir), "--team", str(team), "--json")
    assert res.code == 0, res.stderr[-3000:]
    doc = report_of(res)
    assert [m["verdict"] for m in doc["members"]] == ["completed", "completed"]
    assert "Find the holes." in prompts["security"]
