"""`.mcp.json` as swarmdeck reads it: entries, problems by file and field, tiers, grants,
tool names, ambiguity, results as text, and the missing SDK refused."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from swarmdeck.errors import ConfigError
from swarmdeck.integrations.mcp import toolset as toolset_module
from swarmdeck.integrations.mcp.config import McpServers, collect_servers
from swarmdeck.integrations.mcp.connection import ListedTool, McpStartError, resolve_refs
from swarmdeck.integrations.mcp.toolset import (
    McpPool,
    McpToolset,
    render_result,
    tool_name,
)
from swarmdeck.plugins.definitions import Plugin
from swarmdeck.tools.base import Effect
from swarmdeck.tools.builtins.registry import builtin_tools
from swarmdeck.tools.toolsets import SessionScope

F = Path("/p/.mcp.json")


def servers(entries: dict) -> McpServers:
    found = McpServers()
    found.add_file(F, {"mcpServers": entries})
    return found


def test_entries_and_their_defaults() -> None:
    found = servers(
        {
            "git": {"command": "git-mcp", "args": ["--ro"], "effect": "read", "default": True},
            "web": {"type": "http", "url": "https://x.test/mcp", "effects": {"get": "read"}},
        }
    )
    assert found.problems == []
    git, web = found.servers["git"].entry, found.servers["web"].entry
    assert (git.transport, git.effect_of("log"), git.startup_timeout) == ("stdio", "read", 20.0)
    assert (web.transport, web.effect_of("get"), web.effect_of("post")) == ("http", "read", "once")
    assert found.granted(None)[0] == [found.servers["git"]]
    assert found.granted(["web", "nope"]) == ([found.servers["web"]], ["nope"])


@pytest.mark.parametrize(
    ("name", "entry", "field", "message"),
    [
        ("a__b", {"command": "x"}, "mcpServers.a__b", "'__' in it would be ambiguous"),
        ("both", {"command": "x", "url": "http://h"}, "mcpServers.both", "not both"),
        ("none", {"args": ["x"]}, "mcpServers.none", "either `command`"),
        ("argv", {"command": "x", "args": ["--token=${key:gh}"]}, "mcpServers.argv", "env"),
        ("url", {"url": "https://h/${key:gh}"}, "mcpServers.url", "headers"),
        ("eff", {"command": "x", "effect": "sometimes"}, "mcpServers.eff.effect", "Input"),
        ("slow", {"command": "x", "startupTimeout": 0}, "mcpServers.slow.startupTimeout", ""),
    ],
)
def test_bad_entries_are_problems_by_file_and_field(
    name: str, entry: dict, field: str, message: str
) -> None:
    found = servers({name: entry})
    assert name not in found.servers
    [problem] = [p for p in found.problems if p.level == "error"]
    assert (problem.path, problem.field) == (F, field)
    assert message in problem.message
    assert found.problems_of(name) == [problem]


def test_unknown_fields_are_warnings() -> None:
    found = servers({"x": {"command": "x", "disabled": False}})
    assert "x" in found.servers
    assert [(p.field, p.level) for p in found.problems] == [("mcpServers.x.disabled", "warning")]


def test_later_tiers_win_and_the_workdir_file_sits_before_the_project_tier(
    tmp_path: Path,
) -> None:
    def plugin(tier: str, command: str) -> Plugin:
        return Plugin(tier, tmp_path / tier, tier, mcp={"mcpServers": {"s": {"command": command}}})

    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"s": {"command": "from-workdir"}}}')
    found = collect_servers([plugin("user", "u"), plugin("project", "p")], tmp_path)
    assert found.servers["s"].entry.command == "p"
    assert [o[1].parent.name for o in found.overrides] == ["user", tmp_path.name]
    found = collect_servers([plugin("user", "u")], tmp_path)
    assert found.servers["s"].entry.command == "from-workdir"


def test_key_references_resolve_and_a_missing_key_names_itself() -> None:
    keys = {"gh": "ghp_secret"}
    assert resolve_refs({"A": "Bearer ${key:gh}", "B": "plain"}, keys.get, "git") == {
        "A": "Bearer ghp_secret",
        "B": "plain",
    }
    with pytest.raises(McpStartError, match=r"no stored key 'npm'.*swarmdeck key set npm --mcp"):
        resolve_refs({"A": "${key:npm}"}, keys.get, "git")


def test_tool_names() -> None:
    assert tool_name("git", "log") == "git__log"
    assert tool_name("fs", "read.file/v2") == "fs__read_file_v2"
    assert len(tool_name("s", "x" * 100)) == 64
    # A builtin never has "__", so a SERVER__TOOL name never shadows one.
    assert not [t.name for t in builtin_tools() if "__" in t.name]


def _conn(name: str, entry: dict):
    found = servers({name: entry})
    return McpPool(lambda _n: None, None).connection(found.servers[name], Path("/project"))


def test_a_stdio_server_runs_in_the_session_workdir_unless_its_entry_says() -> None:
    assert _conn("git", {"command": "x"}).cwd == Path("/project")
    assert _conn("git", {"command": "x", "cwd": "sub"}).cwd == Path("/project/sub")
    assert _conn("git", {"command": "x", "cwd": "/srv/repo"}).cwd == Path("/srv/repo")
    assert _conn("web", {"url": "https://mcp.example.com/mcp"}).cwd is None
    # One process per workdir: two sessions elsewhere get a server each.
    pool = McpPool(lambda _n: None, None)
    server = servers({"git": {"command": "x"}}).servers["git"]
    assert pool.connection(server, Path("/a")) is pool.connection(server, Path("/a"))
    assert pool.connection(server, Path("/a")) is not pool.connection(server, Path("/b"))


def test_tools_that_map_to_one_name_are_all_refused() -> None:
    conn = _conn("fs", {"command": "x", "effects": {"stat": "read"}})
    listed = [
        ListedTool("read.file", "", {"type": "object"}),
        ListedTool("read_file", "", {"type": "object"}),
        ListedTool("read/file", "", {"type": "object"}),
        ListedTool("stat", "Stat a file.", {"type": "object", "properties": {"p": {}}}),
    ]
    tools, problems = McpToolset(McpPool(lambda _n: None, None)).tools_of(conn, listed)
    assert [t.name for t in tools] == ["fs__stat"]
    assert len(problems) == 2 and all("fs__read_file" in p for p in problems)
    [stat] = tools
    assert stat.effect is Effect.READ and "explore" in stat.modes
    assert stat.spec().parameters == {"type": "object", "properties": {"p": {}}}


def test_effects_decide_the_modes() -> None:
    conn = _conn("s", {"command": "x"})
    tools, _ = McpToolset(McpPool(lambda _n: None, None)).tools_of(
        conn, [ListedTool("write", "", {})]
    )
    [write] = tools
    assert write.effect is Effect.ONCE
    assert not write.offered_to("explore") and write.offered_to("code")
    assert write.spec().parameters == {"type": "object", "properties": {}}


def test_results_as_text() -> None:
    result = SimpleNamespace(
        content=[
            SimpleNamespace(type="text", text="hello"),
            SimpleNamespace(type="image", mime_type="image/png", data="QUFB"),
            SimpleNamespace(type="resource_link", name="doc", uri="file:///d"),
            SimpleNamespace(type="resource", resource=SimpleNamespace(uri="u", text="inline")),
            SimpleNamespace(type="resource", resource=SimpleNamespace(uri="b", blob="AA")),
        ],
        structured_content=None,
    )
    assert render_result(result).splitlines() == [
        "hello",
        "[image image/png, 3 bytes, not shown]",
        "[resource doc: file:///d]",
        "inline",
        "[resource b, binary, not shown]",
    ]
    only_data = SimpleNamespace(content=[], structured_content={"n": 1})
    assert render_result(only_data) == '{"n": 1}'


def test_granted_servers_without_the_sdk_are_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(toolset_module, "sdk_available", lambda: False)
    (tmp_path / ".mcp.json").write_text(
        '{"mcpServers": {"git": {"command": "g", "default": true}}}'
    )
    toolset = McpToolset(McpPool(lambda _n: None, None))
    scope = SessionScope("s1", "code", tmp_path, {})
    with pytest.raises(ConfigError) as err:
        toolset.preflight(scope)
    assert err.value.one_line() == (
        "MCP servers are configured for this session (git) but the MCP SDK is not installed "
        "(install the extra: pip install 'swarmdeck[mcp]')"
    )
    with pytest.raises(ConfigError):
        asyncio.run(toolset.tools_for(scope))
    # Nothing granted: nothing to refuse.
    toolset.preflight(SessionScope("s2", "code", tmp_path, {"mcp_servers": []}))


def test_a_granted_name_nobody_declares_is_reported(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"bad__name": {"command": "g"}}}')
    toolset = McpToolset(McpPool(lambda _n: None, None))
    scope = SessionScope("s", "code", tmp_path, {"mcp_servers": ["ghost", "bad__name"]})
    found = asyncio.run(toolset.tools_for(scope))
    assert found.tools == []
    texts = [text for _key, text in found.notices]
    assert texts[0] == "MCP server ghost: no .mcp.json declares it"
    assert texts[1].startswith(f"MCP server bad__name: {tmp_path / '.mcp.json'}: field")


def test_agents_validate_names_mcp_problems(sd_home: Path, tmp_path: Path) -> None:
    from tests.integration.test_dispatch_modes import invoke

    plugin = tmp_path / "plug"
    (plugin / "agents").mkdir(parents=True)
    (plugin / "agents" / "a.agent.md").write_text(
        "---\nname: a\ndescription: d\nmcpServers: [git, ghost]\n---\nBody.\n"
    )
    (plugin / ".mcp.json").write_text(
        '{"mcpServers": {"git": {"command": "g"}, "bad": {"command": "x", "args": ["${key:k}"]}}}'
    )
    res = invoke(sd_home, "agents", "validate", str(plugin))
    assert res.code == 2
    assert (
        f"{plugin / 'agents' / 'a.agent.md'}: field 'mcpServers': no .mcp.json declares a server 'ghost'"
        in res.stdout
    )
    assert (
        f"{plugin / '.mcp.json'}: field 'mcpServers.bad': a ${{key:...}} reference in args"
        in res.stdout
    )
    assert "'git'" not in res.stdout
