"""docs/swarm.md stays true to the code: every field of the swarm's object and of its
members, every swarm verdict, the team and recovery fields."""

from __future__ import annotations

from pathlib import Path

from swarmdeck.swarm.report import MEMBER_FIELDS, REPORT_FIELDS, SCHEMA_VERSION, VERDICTS
from swarmdeck.swarm.team import RecoveryPolicy, Team, TeamMember

DOC = (Path(__file__).parents[2] / "docs" / "swarm.md").read_text(encoding="utf-8")
OUTPUT = DOC.split("## Output\n", 1)[1]
TEAMS = DOC.split("## Team templates\n", 1)[1].split("\n## ", 1)[0]


def test_every_field_and_verdict_is_documented() -> None:
    table = OUTPUT.split("| field | meaning |", 1)[1]
    rows = [line.split("|")[1] for line in table.strip().splitlines()[1:] if line.startswith("|")]
    assert [f.strip("` ") for row in rows for f in row.split(",")] == list(REPORT_FIELDS)
    assert f"`[{{{', '.join(MEMBER_FIELDS)}}}]`" in OUTPUT
    for verdict in VERDICTS:
        assert f"`{verdict}`" in OUTPUT, verdict
    assert f"`{SCHEMA_VERSION}`" in OUTPUT


def test_every_team_field_is_documented() -> None:
    for model in (Team, TeamMember, RecoveryPolicy):
        for name in model.model_fields:
            assert f"{name}:" in TEAMS or f"`{name}`" in TEAMS, (model.__name__, name)
