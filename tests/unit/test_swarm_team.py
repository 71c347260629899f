"""Team templates: the packaged teams, llmcode's JSON team files as they are (written by
llmcode's own code from the reference), YAML with recovery, errors, tiers, save and rm."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from swarmdeck.errors import ConfigError, NotFoundError, UsageError
from swarmdeck.swarm.merge import merge
from swarmdeck.swarm.team import list_teams, load_team, parse_team, remove_team, save_team

TEAMS = Path(__file__).resolve().parents[2] / "src/swarmdeck/swarm/teams"
REFERENCE = Path("/work/shared/reference/llmcode-cli-1.0.0-swarm.txt")
EXTRACT = REFERENCE.with_name("extract.py")


def llmcode_team_file(tmp_path: Path) -> Path:
    """A team file written by llmcode's own save_team, from the reference as it shipped."""
    dest = tmp_path / "llmcode"
    subprocess.run([sys.executable, str(EXTRACT), str(REFERENCE), str(dest)], check=True)
    spec = importlib.util.spec_from_file_location("llmcode_team", dest / "llm_code/swarm/team.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["llmcode_team"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    team = module.TeamTemplate(
        name="auditors",
        description="llmcode's auditors",
        members=(
            module.TeamMemberTemplate(
                role="security", model="fake", backend="tmux", system_prompt="Find the holes."
            ),
            module.TeamMemberTemplate(role="docs", system_prompt="Check the docs."),
        ),
        coordinator_model="fake",
        max_timeout=300,
    )
    return Path(module.save_team(team, tmp_path / "llmcode-teams"))


def test_llmcode_json_loads_as_it_is(tmp_path: Path) -> None:
    path = llmcode_team_file(tmp_path)
    assert path.suffix == ".json" and "backend" in json.loads(path.read_text())["members"][0]
    team = parse_team(path)
    assert team.name == "auditors" and team.coordinator_model == "fake"
    assert team.max_timeout == 300
    assert [(m.role, m.model, m.system_prompt) for m in team.members] == [
        ("security", "fake", "Find the holes."),
        ("docs", "", "Check the docs."),
    ]
    assert team.notes() == ["security: backend 'tmux' is ignored (members are durable sessions)"]
    assert team.recovery.max_retries == 2 and team.recovery.on_all_failed == "abort"


def test_packaged_teams() -> None:
    review = parse_team(TEAMS / "review.yaml")
    assert [(m.role, m.mode) for m in review.members] == [
        ("security", "review"),
        ("performance", "review"),
        ("tests", "test"),
    ]
    feature = parse_team(TEAMS / "feature.yaml")
    assert [(m.role, m.mode) for m in feature.members] == [
        ("coder", "code"),
        ("tester", "test"),
        ("reviewer", "review"),
    ]
    assert all(m.system_prompt for m in [*review.members, *feature.members])


def test_yaml_recovery_and_llmcode_field_names(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(
        "name: t\nmembers:\n  - {role: a, mode: explore}\n  - {role: b}\n"
        "recovery: {max_retries: 0, retry_delay_sec: 7, on_all_failed: reassign, reassign_to: b}\n"
    )
    team = parse_team(path)
    assert (team.recovery.retry_delay, team.recovery.reassign_to) == (7, "b")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("name: t\nmembers: []\n", "members: List should have at least 1 item"),
        ("name: t\nmembers:\n  - {role: a}\n  - {role: a}\n", "members[1].role: 'a' appears"),
        ("name: t\nmembers:\n  - {role: a, colour: red}\n", "members.0.colour: Extra inputs"),
        (
            "name: t\nmembers:\n  - {role: a}\nrecovery: {on_all_failed: reassign, reassign_to: z}\n",
            "recovery.reassign_to: 'z' is neither a role of the team nor a provider:model",
        ),
        ("name: t\nmembers:\n  - {role: a, mode: write}\n", "members.0.mode: Input should be"),
        ("- just a list\n", "must be a mapping with name and members"),
        ("name: [unclosed\n", "does not parse"),
    ],
)
def test_bad_team_files_name_the_file_and_the_field(
    tmp_path: Path, body: str, problem: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError) as caught:
        parse_team(path)
    assert str(path) in caught.value.message and problem in caught.value.message


def test_tiers_save_and_rm(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    assert [t.team.name for t in list_teams(home)] == ["feature", "review"]
    mine = tmp_path / "review.yaml"
    mine.write_text("name: review\ndescription: mine\nmembers:\n  - {role: only, mode: review}\n")
    saved = save_team(mine, home)
    assert saved.path == home / "teams" / "review.yaml" and saved.tier == "user"
    assert load_team("review", home).team.description == "mine"  # the user's wins
    with pytest.raises(UsageError, match="saved already"):
        save_team(mine, home)
    save_team(mine, home, force=True)
    (project / ".swarmdeck/teams").mkdir(parents=True)
    (project / ".swarmdeck/teams/review.json").write_text(
        json.dumps({"name": "review", "description": "project's", "members": [{"role": "p"}]})
    )
    assert load_team("review", home, project).tier == "project"
    assert load_team(str(mine), home).tier == "file"
    assert remove_team("review", home) == home / "teams" / "review.yaml"
    assert load_team("review", home).tier == "packaged"
    with pytest.raises(UsageError, match="packaged team and cannot be removed"):
        remove_team("review", home)
    with pytest.raises(NotFoundError, match="no team named 'ghost'"):
        load_team("ghost", home)
    with pytest.raises(UsageError, match="team file not found"):
        load_team(str(tmp_path / "ghost.yaml"), home)


def test_the_deterministic_merge_renders_each_mode() -> None:
    from swarmdeck.dispatch.modes import RESULT_EXAMPLES

    outcomes = [
        {"role": r, "mode": mode, "verdict": "completed", "result": RESULT_EXAMPLES[mode][0]}
        for r, mode in (("c", "code"), ("t", "test"), ("e", "explore"), ("r", "review"))
    ]
    outcomes.append({"role": "x", "mode": "review", "verdict": "error", "reason": "it crashed"})
    text = merge(outcomes, [{"role": "d", "reason": "over the limit"}], "its turn failed")
    assert "(merged without the coordinator's model: its turn failed)" in text
    assert "status complete; files changed: src/app.py, tests/test_app.py" in text
    assert "`pytest -q tests/unit`: 41 passed, 1 failed" in text
    assert "- load() caches the parsed file (src/cfg.py:42)" in text
    assert "- [medium] src/io.py:88: write() ignores a failed flush" in text
    assert "## x (review): error\n\nno result: it crashed" in text
    assert "- d: over the limit" in text
