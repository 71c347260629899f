"""The tool index and the lean schemas: what every prompt carries of the tools."""

from __future__ import annotations

from pydantic import BaseModel, Field

from swarmdeck.tools.base import Effect, Tool
from swarmdeck.tools.builtins.load_tools import LOAD_TOOLS_TOOL
from swarmdeck.tools.lean_schema import lean_schema
from swarmdeck.tools.tool_index import (
    core_tools,
    for_shape,
    index_phrase,
    index_text,
    search_index,
    split_offer,
)


class Args(BaseModel):
    """Arguments of a tool (pydantic puts this docstring in the schema)."""

    path: str
    limit: int | None = Field(None, ge=1, description="how many")
    title: str = Field("x", description="a property called title stays")


async def _body(_ctx, _args) -> str:
    return ""


def tool(name: str, description: str = "Do a thing to the files.", **extra) -> Tool:
    return Tool(name, description, Args, Effect.READ, _body, **extra)


def test_lean_schema_keeps_what_validates_and_drops_what_people_read() -> None:
    lean = lean_schema(Args.model_json_schema())
    assert lean == {
        "properties": {
            "path": {"type": "string"},
            "limit": {"minimum": 1, "type": "integer", "description": "how many"},
            "title": {
                "default": "x",
                "description": "a property called title stays",
                "type": "string",
            },
        },
        "required": ["path"],
        "type": "object",
    }


def test_split_offer_shows_core_then_load_tools_then_loaded_in_order() -> None:
    tools = [tool(n) for n in ("read_file", "list_dir", "glob", "shell")]
    core = frozenset({"read_file", "shell"})
    first = split_offer(tools, core, [], LOAD_TOOLS_TOOL)
    assert [t.name for t in first.shown] == ["read_file", "shell", "load_tools"]
    assert [t.name for t in first.indexed] == ["list_dir", "glob"]
    later = split_offer(tools, core, ["glob", "list_dir", "nonesuch"], LOAD_TOOLS_TOOL)
    assert [t.name for t in later.shown] == ["read_file", "shell", "load_tools", "glob", "list_dir"]
    assert later.indexed == first.indexed  # the index (in the system prompt) never changes
    eager = split_offer([*tools, tool("srv__x", eager=True)], core, [], LOAD_TOOLS_TOOL)
    assert "srv__x" in [t.name for t in eager.shown]
    nothing_left = split_offer(tools[:1], core, [], LOAD_TOOLS_TOOL)
    assert [t.name for t in nothing_left.shown] == ["read_file"]  # no load_tools needed


def test_the_core_edit_tool_follows_the_provider_shape() -> None:
    assert "edit_file" in core_tools("code", None, "plain")
    assert "apply_patch" in core_tools("code", None, "openai_apply_patch")
    assert "str_replace_based_edit_tool" in core_tools("code", None, "anthropic_text_editor")
    assert core_tools("explore", ["read_file"], "plain") == {"read_file"}
    editors = [tool("edit_file"), tool("str_replace_based_edit_tool")]
    assert [t.name for t in for_shape(editors, "plain")] == ["edit_file"]
    assert [t.name for t in for_shape(editors, "anthropic_text_editor")] == [
        "str_replace_based_edit_tool"
    ]


def test_the_index_has_a_line_a_tool_and_a_line_a_server() -> None:
    described = tool("spawn_agent", "Start a sub-agent session on a task (or a named agent).")
    assert index_phrase(described) == "Start a sub-agent session"
    mcp = [tool(f"srv__t{i}", group="srv") for i in range(5)]
    text = index_text([described, *mcp])
    assert "- spawn_agent: Start a sub-agent session" in text
    assert "- srv (MCP, 5 tools: search 'srv'): srv__t0, srv__t1, srv__t2, …" in text
    assert index_text([]) == ""
    # OpenAI's hosted search shows each server as a namespace: the index leaves it out.
    hosted = split_offer([described, *mcp], frozenset(), [], None, search="hosted").index()
    assert "- spawn_agent: Start a sub-agent session" in hosted and "srv" not in hosted
    assert split_offer(mcp, frozenset(), [], None, search="hosted").index() == ""


def test_search_finds_by_words_and_by_server() -> None:
    tools = [
        tool("spawn_agent", "Start a sub-agent session on a task."),
        tool("memory_set", "Write a key of the shared blackboard."),
        *[tool(f"git__{n}", f"Git {n}.", group="git") for n in ("log", "diff")],
    ]
    assert next(t.name for t in search_index(tools, "start a sub-agent")) == "spawn_agent"
    assert {t.name for t in search_index(tools, "git")} == {"git__log", "git__diff"}
    assert search_index(tools, "teleport") == []


def test_the_fake_prompt_cache_is_shared_per_api_key() -> None:
    """As the vendors' caches: a prefix written with one key serves every conversation made
    with it (a sibling's first request), and none made with another key."""
    from swarmdeck.testing.prompt_cache import PromptCache

    cache = PromptCache(min_tokens=10)
    prefix = [{"role": "system", "content": "team context " * 40}]
    first = {"messages": [*prefix, {"role": "user", "content": "member one"}]}
    sibling = {"messages": [*prefix, {"role": "user", "content": "member two"}]}
    assert cache.serve("openai", first, "key-a").read == 0
    assert cache.serve("openai", sibling, "key-a").read > 0
    assert cache.serve("openai", sibling, "key-b").read == 0


def test_with_the_vendors_search_the_rest_is_deferred_not_loaded() -> None:
    tools = [tool(n) for n in ("read_file", "list_dir", "glob", "shell")]
    core = frozenset({"read_file", "shell"})
    offer = split_offer(tools, core, ["glob"], LOAD_TOOLS_TOOL, search="bm25")
    # No load_tools (the vendor expands what its search found); what a skill loaded is shown.
    assert [t.name for t in offer.shown] == ["read_file", "shell", "glob"]
    specs = offer.specs()
    assert [(s.name, s.deferred) for s in specs] == [
        ("read_file", False),
        ("shell", False),
        ("glob", False),
        ("list_dir", True),
    ]
    assert offer.indexed == split_offer(tools, core, [], None, search="bm25").indexed
    assert offer.index().startswith("Tools to find with your tool search first")
    ours = split_offer(tools, core, ["glob"], LOAD_TOOLS_TOOL)
    assert not any(s.deferred for s in ours.specs())
    assert ours.index().startswith("Tools to load_tools(names=[...]) first:")
