"""Plugin folders on disk: the PilotSwarm reference folders load as they shipped and
validate clean; tiers override by name; every malformed file is named by file and field,
and one bad file hides no other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarmdeck.plugins.aliases import TOOL_ALIASES, resolve_tool
from swarmdeck.plugins.tiers import load_plugin_set
from swarmdeck.plugins.validate import report
from swarmdeck.runtime.agents import agent_tools
from swarmdeck.tools.builtins.registry import builtin_tools
from tests.conftest import run_cli
from tests.plugins.support import agent_file, reference_plugins, write

TOOLS = [t.name for t in builtin_tools()]


@pytest.fixture
def reference(tmp_path: Path) -> Path:
    return reference_plugins(tmp_path / "ref")


def test_reference_folders_load_and_validate_clean(
    reference: Path, sd_home: Path, tmp_path: Path
) -> None:
    found = load_plugin_set(sd_home, None, [reference])
    ref = [p for p in found.plugins if p.tier == "given"]
    assert sorted(p.name for p in ref) == ["mgmt", "system"]
    assert sorted(a.name for p in ref for a in p.agents) == [
        "default",
        "pilotswarm",
        "resourcemgr",
        "sweeper",
    ]
    # The fenced SKILL.md loads like the others.
    sub = found.skills["sub-agents"]
    assert sub.path == reference / "system/skills/sub-agents/SKILL.md"
    assert sub.description.startswith("Expert knowledge on spawning")
    assert sub.body.startswith("# Sub-Agent Delegation") and "````" not in sub.body
    assert found.skills["sweeper"].tools == [
        "scan_completed_sessions",
        "cleanup_session",
        "prune_orchestrations",
        "get_system_stats",
    ]
    sweeper = found.agents["sweeper"]
    assert sweeper.system and sweeper.id == "sweeper" and sweeper.parent == "pilotswarm"
    assert sweeper.initial_prompt.startswith("You are a PERMANENT maintenance agent.")
    assert "____" in sweeper.splash
    # Every reference tool name means a swarmdeck tool: no error in the report.
    problems = report(found, TOOLS, only_under=[reference])
    assert [p for p in problems if p.level == "error"] == []
    # The one warning: the splash whose ASCII art is indented less than its block.
    assert [(p.path.name, p.field) for p in problems] == [("resourcemgr.agent.md", "splash")]
    assert resolve_tool("bash") == "shell" and resolve_tool("export_artifact") == "write_artifact"
    assert all(v in TOOLS for v in TOOL_ALIASES.values())
    assert "shell" in agent_tools(found.agents["default"])

    res = run_cli(sd_home, "agents", "validate", str(reference))
    assert res.code == 0, res.stdout + res.stderr
    assert res.stdout.strip().endswith("8 file(s) checked: clean, 1 warning(s)")
    # The packaged plugins (every tier, no folder given) validate clean too.
    packaged = run_cli(sd_home, "agents", "validate")
    assert (
        packaged.code == 0 and packaged.stdout.strip() == "8 file(s) checked: clean, 0 warning(s)"
    )


def test_validate_names_exactly_the_tools_swarmdeck_lacks(reference: Path, sd_home: Path) -> None:
    sweeper = reference / "mgmt/agents/sweeper.agent.md"
    sweeper.write_text(sweeper.read_text().replace("  - get_system_stats\n", "  - warp_drive\n", 1))
    tools_json = reference / "mgmt/skills/sweeper/tools.json"
    tools_json.write_text(json.dumps({"tools": ["cleanup_session", "time_machine"]}))
    res = run_cli(sd_home, "agents", "validate", str(reference))
    assert res.code == 2
    errors = [line for line in res.stdout.splitlines() if line.startswith("error")]
    assert errors == [
        f"error {sweeper}: field 'tools': swarmdeck has no tool 'warp_drive'",
        f"error {tools_json}: field 'tools': swarmdeck has no tool 'time_machine'",
    ]


def test_every_malformed_file_is_named_by_file_and_field(tmp_path: Path, sd_home: Path) -> None:
    plugin = tmp_path / "broken"
    bad_yaml = agent_file(plugin, "a", "name: a\ntools: [read_file\n")
    bad_field = agent_file(plugin, "b", "name: b\ntools: read_file\nsystem: maybe\n")
    unknown = agent_file(plugin, "c", "name: c\ncolour: blue\n")
    good = agent_file(plugin, "d", "name: d\ndescription: fine\ntools: [read_file]\n")
    unclosed = write(plugin / "agents/e.agent.md", "---\nname: e\nno end here\n")
    bad_tools = write(plugin / "skills/s1/tools.json", '{"tools": "shell"}')
    write(plugin / "skills/s1/SKILL.md", "---\nname: s1\ndescription: one\n---\nBody.\n")
    bad_json = write(plugin / "skills/s2/tools.json", "{not json")
    write(plugin / "skills/s2/SKILL.md", "---\nname: s2\ndescription: two\n---\nBody.\n")
    no_skill = plugin / "skills/s3"
    no_skill.mkdir(parents=True)
    stray = write(plugin / "agents/notes.md", "not an agent")
    bad_manifest = write(plugin / "plugin.json", '{"name": 7}')

    found = load_plugin_set(sd_home, None, [plugin])
    lines = {(p.path, p.field, p.level) for p in report(found, TOOLS, only_under=[plugin])}
    assert (bad_yaml, None, "error") in lines
    assert (bad_field, "tools", "error") in lines
    assert (bad_field, "system", "error") in lines
    assert (unknown, "colour", "warning") in lines
    assert (unclosed, None, "error") in lines
    assert (bad_tools, "tools", "error") in lines
    assert (bad_json, None, "error") in lines
    assert (no_skill, None, "error") in lines
    assert (stray, None, "warning") in lines
    assert (bad_manifest, "name", "error") in lines
    assert not any(path == good for path, _f, _l in lines)
    # The good file and the unknown-field file load; the broken ones do not.
    assert sorted(a.name for p in found.plugins if p.tier == "given" for a in p.agents) == [
        "c",
        "d",
    ]
    assert found.agents["c"].extra == {"colour": "blue"}

    res = run_cli(sd_home, "agents", "validate", str(plugin))
    assert res.code == 2
    out = res.stdout
    assert f"{bad_field}: field 'system': Input should be a valid boolean" in out
    assert f"{bad_tools}: field 'tools': Input should be a valid list" in out
    assert f"{bad_json}: not valid JSON" in out
    assert "Traceback" not in res.stderr
    shown = run_cli(sd_home, "agents", "show", "c", "--plugin", str(plugin))
    assert shown.code == 0 and "colour: blue  (unknown field, kept)" in shown.stdout


def test_tiers_override_by_name_later_wins(tmp_path: Path, sd_home: Path) -> None:
    project = tmp_path / "project"
    given = tmp_path / "given"
    front = "name: sweeper\ndescription: {}\n"
    agent_file(sd_home / "plugins" / "mine", "sweeper", front.format("user's"))
    agent_file(sd_home, "helper", "name: helper\ndescription: home agents/ still load\n")
    agent_file(project / ".swarmdeck", "sweeper", front.format("project's"))
    agent_file(project / ".swarmdeck", "only-project", "name: only-project\n")

    def winner(name: str, workdir: Path | None, extra: list[Path]) -> str:
        return load_plugin_set(sd_home, workdir, extra).agents[name].description

    assert winner("sweeper", None, []) == "user's"
    assert winner("sweeper", project, []) == "project's"
    agent_file(given, "sweeper", front.format("given"))
    both = load_plugin_set(sd_home, project, [given])
    assert both.agents["sweeper"].description == "given"
    assert [o.loser.parent.parent.name for o in both.overrides if o.name == "sweeper"] == [
        "mgmt",  # packaged
        "mine",  # the user's plugins/mine
        ".swarmdeck",  # the project's
    ]
    assert both.agents["helper"].tier == "user" and "only-project" in both.agents
    # The base agent stays the packaged one whatever a tier defines.
    agent_file(given, "default", "name: default\n", "a replacement base")
    from swarmdeck.plugins.tiers import base_agent

    assert base_agent().path.parent.parent.name == "system"
    assert "durable swarmdeck session" in base_agent().body

    listed = run_cli(sd_home, "agents", "ls", "--workdir", str(project), "--json")
    names = {a["name"]: a for a in json.loads(listed.stdout)}
    assert names["sweeper"]["tier"] == "project" and names["operator"]["system"]
