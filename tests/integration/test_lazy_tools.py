"""Tools on demand (issue 34, item 1), through the real SDKs, by both mechanisms with the
same test bodies: swarmdeck's own (an index in the prompt, `load_tools` to load; openai
providers, anthropic and openai-responses with `tool_search: off`) and the vendors' (the
tool search of Anthropic and of OpenAI's Responses API: the other tools sent with
`defer_loading`, found by a search the server runs). The
prompt carries the core schemas and an index of the rest; a tool brought in stays callable
across a SIGKILL and a resume, behind a prefix that does not change (so a cache keeps
serving it); MCP servers' tools are indexed unless `eager`; the `eager` setting sends
everything."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing import responses_wire
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.prompt_cache import prompt_tokens
from swarmdeck.testing.request import deferred_tools, output_tools
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from swarmdeck.views.transcript import Transcript
from tests.conftest import write_provider
from tests.integration.test_sessions_support import expect_killed, finish, open_catalog, popen_cli

CODE_CORE = ["read_file", "grep", "write_file", "edit_file", "shell", "submit_result"]


@dataclass(frozen=True)
class Scheme:
    """A way tools come on demand: the provider it takes, and the tool that loads them."""

    name: str
    kind: str
    loader: str
    fields: tuple[tuple[str, str], ...] = ()

    @property
    def vendor(self) -> bool:
        return self.loader != "load_tools"


SCHEMES = [
    Scheme("openai-load_tools", "openai", "load_tools"),
    Scheme("anthropic-tool_search", "anthropic", "tool_search_tool_bm25"),
    Scheme("anthropic-regex", "anthropic", "tool_search_tool_regex", (("tool_search", "regex"),)),
    Scheme("anthropic-off-load_tools", "anthropic", "load_tools", (("tool_search", "off"),)),
    Scheme("responses-tool_search", "openai-responses", "tool_search"),
    Scheme("responses-off-load_tools", "openai-responses", "load_tools", (("tool_search", "off"),)),
]
RESPONSES = SCHEMES[4]
BOTH = pytest.mark.parametrize("scheme", SCHEMES, ids=[s.name for s in SCHEMES])


def asked(fake: FakeLLM) -> list[FakeRequest]:
    """The model calls the fake server received, in order, as scripts see them."""
    return [
        responses_wire.validate(r.body, frozenset())
        if r.path.endswith("/responses")
        else FakeRequest.from_body(
            "anthropic" if r.path.endswith("/messages") else "openai", r.body
        )
        for r in fake.requests
        if r.method == "POST" and isinstance(r.body, dict)
    ]


def tool_names(request: FakeRequest) -> list[str]:
    """The names of the tools whose schemas a request carried in its prompt, in order (the
    Responses API's tool search has only its type)."""
    tools = [
        t
        for t in request.body.get("tools") or []
        if not t.get("defer_loading") and t.get("type") != "namespace"  # a namespace's are
    ]
    return [t.get("name") or t.get("function", {}).get("name") or t["type"] for t in tools]


def deferred_names(request: FakeRequest) -> list[str]:
    """The tools a request sent for the vendor's search to find, not in its prompt (those
    of a Responses namespace too)."""
    return list(deferred_tools(request.body))


def loaded(request: FakeRequest) -> list[str]:
    """The tools the model may call beyond its core: those a search of the conversation
    found (the vendor's), or the schemas shown past load_tools (ours)."""
    if request.tool_search:
        return request.found_tools
    names = tool_names(request)
    return names[names.index("load_tools") + 1 :] if "load_tools" in names else []


def unmarked(value: Any) -> Any:
    """A request part without its cache breakpoints (they move to the last block)."""
    if isinstance(value, Mapping):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list | tuple):
        return [unmarked(v) for v in value]
    return value


def _holds_deferred(tool: dict[str, Any]) -> bool:
    """A deferred tool, or a Responses namespace (whose tools are)."""
    return bool(tool.get("defer_loading")) or tool.get("type") == "namespace"


def _undeferred(tool: dict[str, Any]) -> dict[str, Any]:
    """The tool sent whole (a namespace: its tools)."""
    if tool.get("type") == "namespace":
        return {**tool, "tools": [_undeferred(t) for t in tool["tools"]]}
    return {**tool, "defer_loading": False}


def system_text(request: FakeRequest) -> str:
    if request.api == "anthropic":
        system = request.body.get("system")
        return system if isinstance(system, str) else "".join(b["text"] for b in system)
    return str(request.messages[0]["content"])


def provider(home: Path, fake: FakeLLM, scheme: Scheme) -> str:
    url = fake.anthropic_base_url if scheme.kind == "anthropic" else fake.openai_base_url
    # The plain edit shape on both wires: edit_file is the core edit tool either way. No
    # cache minimum, so no schema fills a short prompt up to one: that filling is
    # tests/swarm/test_prefix_fill.py's.
    write_provider(home, "fake", url, kind=scheme.kind, edit_tools="plain",
                   prompt_cache_min_tokens=0, **dict(scheme.fields))  # fmt: skip
    return "fake:scripted"


def load(request: FakeRequest, name: str, query: str, *then: ReplyToolCall) -> Reply:
    """Bring a tool in as the request offers it, as a model would: a search with the
    vendor's tool search (words for BM25, a pattern for the regex variant; in the same
    answer, the calls `then`), else load_tools."""
    if request.tool_search:
        return Reply(tool_search=search_query(request, name, query), tool_calls=then)
    return Reply(tool_calls=(ReplyToolCall("load_tools", {"names": [name]}),))


def search_query(request: FakeRequest, name: str, words: str) -> str:
    """What a model searches for `name` with: words, or (regex) a pattern of its name."""
    return f"(?im)^{name}$" if request.tool_search == "regex" else words


def load_then_list(request: FakeRequest) -> Reply:
    """Bring list_dir in, use it, then finish."""
    list_dir = ReplyToolCall("list_dir", {"path": "."})
    if request.turn == 0:
        return load(request, "list_dir", "list the files of a directory", list_dir)
    if request.turn == 1:
        return Reply(tool_calls=(list_dir,))
    return Reply(text="listed")


def first_calls(scheme: Scheme) -> list[str]:
    """What load_then_list's first turn calls of the session's tools."""
    return ["list_dir"] if scheme.vendor else ["load_tools"]


@BOTH
def test_the_prompt_carries_the_core_and_an_index(
    scheme: Scheme, sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    model = provider(sd_home, fake_llm, scheme)
    fake_llm.set_script(load_then_list)
    code, _out, err = finish(popen_cli(sd_home, "run", "look around", "--model", model,
                                      "--mode", "code", "--workdir", str(workdir)))  # fmt: skip
    assert code == 0, err
    first, second, third = asked(fake_llm)[:3]
    assert tool_names(first) == [*CODE_CORE, scheme.loader]
    index = system_text(first)
    assert "- list_dir: List a directory" in index and "- spawn_agent:" in index
    if scheme.vendor:
        # Sent, but not in the prompt: Anthropic's model sees nothing of them, OpenAI's
        # their names and descriptions, not their schemas (the fake weighs them so).
        assert {"list_dir", "spawn_agent"} <= set(deferred_names(first))
        tools = first.body["tools"]
        bare = {**first.body, "tools": [t for t in tools if not _holds_deferred(t)]}
        whole = {**first.body, "tools": [_undeferred(t) for t in tools]}
        weight = prompt_tokens(first.api, first.body)
        if scheme.kind == "anthropic":
            assert weight == prompt_tokens(first.api, bare)
        else:
            assert prompt_tokens(first.api, bare) < weight < prompt_tokens(first.api, whole)
    else:
        assert deferred_names(first) == [] and "list_dir" not in tool_names(first)
    assert loaded(first) == [] and "list_dir" in loaded(second) and "list_dir" in loaded(third)
    # The prefix only grows at its end: tools, system prompt and history as sent before.
    for before, after in ((first, second), (second, third)):
        tools = unmarked(after.body["tools"])
        assert tools[: len(before.body["tools"])] == unmarked(before.body["tools"])
        assert system_text(after) == index
        assert unmarked(after.messages[: len(before.messages)]) == unmarked(before.messages)
    assert "README.md" in third.last_tool_result


@BOTH
def test_a_loaded_tool_stays_loaded_across_a_sigkill(
    scheme: Scheme, sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    model = provider(sd_home, fake_llm, scheme)
    fake_llm.set_script(load_then_list)
    fake_llm.cache.min_tokens = 256  # a lean prompt is cached too: the test reads its prefix
    sid = Host().create_session(SessionRequest("look around", model, workdir, mode="code")).id
    # Killed as turn 1 is about to be asked: the load is journaled, nothing held in memory.
    expect_killed(popen_cli(sd_home, "sessions", "resume", sid, SWARMDECK_CRASH_AT="llm.before:2"))
    assert len(asked(fake_llm)) == 1
    code, _, err = finish(popen_cli(sd_home, "sessions", "resume", sid))
    assert code == 0, err
    first, resumed = asked(fake_llm)[:2]
    assert resumed.turn == 1 and "list_dir" in loaded(resumed)
    # The resumed request sends the history back as the vendor wrote it (server blocks and
    # all) behind the same tools and system prompt: the prefix cached before the kill holds.
    assert unmarked(resumed.messages[: len(first.messages)]) == unmarked(first.messages)
    assert unmarked(resumed.body["tools"])[: len(first.body["tools"])] == unmarked(
        first.body["tools"]
    )
    turn = next(m for m in resumed.messages if m["role"] == "assistant")
    content = turn["content"]
    kinds = [b["type"] for b in content] if isinstance(content, list) else []
    if scheme.vendor:
        query = search_query(first, "list_dir", "list the files of a directory")
        if scheme.kind == "anthropic":
            assert kinds == ["server_tool_use", "tool_search_tool_result", "tool_use"]
            assert content[0]["input"] == {"query": query}
        else:  # the Responses API's items; the call is the turn's function_call item
            assert kinds == ["tool_search_call", "tool_search_output"]
            assert content[0]["arguments"] == {"query": query}
            assert output_tools(content[1])[0][0] == "list_dir"  # BM25's best
            assert [c["function"]["name"] for c in turn["tool_calls"]] == ["list_dir"]
    turns = open_catalog().events(sid, kinds=["assistant"])
    assert turns[1].payload["usage"]["cache_read"] > 0
    if scheme.vendor:  # the transcript (sessions show, the TUI) shows the search
        heads = [e.head for e in Transcript().add(turns)]
        assert any(h.startswith("tool search(") and "→ list_dir" in h for h in heads), heads
    results = open_catalog().events(sid, kinds=["tool_result"])
    assert [r.payload["name"] for r in results] == [*first_calls(scheme), "list_dir"]
    assert not any(r.payload["is_error"] for r in results)


@pytest.mark.parametrize("scheme", [SCHEMES[1], RESPONSES], ids=["anthropic", "responses"])
def test_a_deferred_tool_no_search_found_cannot_be_called(
    scheme: Scheme, sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    """As with the vendor: the model cannot call a tool it was never shown."""
    model = provider(sd_home, fake_llm, scheme)
    fake_llm.set_script(lambda _r: Reply(tool_calls=(ReplyToolCall("list_dir", {"path": "."}),)))
    code, _, err = finish(popen_cli(sd_home, "run", "look", "--model", model, "--mode", "code",
                                    "--workdir", str(workdir)))  # fmt: skip
    assert code != 0
    assert "tool 'list_dir' is deferred (defer_loading: true) and no tool search" in err


def test_load_tools_refuses_a_name_it_does_not_know_and_searches_by_words(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    model = provider(sd_home, fake_llm, SCHEMES[0])
    calls = [
        ReplyToolCall("load_tools", {"names": ["teleport"]}),
        ReplyToolCall("load_tools", {"search": "sub-agent start"}),
    ]
    fake_llm.set_script(
        lambda r: Reply(tool_calls=(calls[r.turn],)) if r.turn < 2 else Reply(text="ok")
    )
    code, _, err = finish(popen_cli(sd_home, "run", "find tools", "--model", model,
                                    "--mode", "code", "--workdir", str(workdir)))  # fmt: skip
    assert code == 0, err
    refused, found = asked(fake_llm)[1].last_tool_result, asked(fake_llm)[2].last_tool_result
    assert "not in your index: teleport" in refused
    assert found.splitlines()[0].startswith("- spawn_agent:")
    assert tool_names(asked(fake_llm)[2]) == [*CODE_CORE, "load_tools"]  # nothing loaded


def test_eager_sends_every_schema(sd_home: Path, workdir: Path, fake_llm: FakeLLM) -> None:
    (sd_home / "settings.yaml").write_text("tools:\n  loading: eager\n")
    model = provider(sd_home, fake_llm, SCHEMES[0])
    fake_llm.set_script(lambda _r: Reply(text="ok"))
    code, _, err = finish(popen_cli(sd_home, "run", "hi", "--model", model, "--mode", "code",
                                    "--workdir", str(workdir)))  # fmt: skip
    assert code == 0, err
    names = tool_names(asked(fake_llm)[0])
    assert {"spawn_agent", "list_dir", "glob"} <= set(names) and "load_tools" not in names
    assert "load_tools(names" not in system_text(asked(fake_llm)[0])


def test_a_bad_tools_setting_is_one_line(sd_home: Path, workdir: Path) -> None:
    (sd_home / "settings.yaml").write_text("tools:\n  loading: sometimes\n")
    code, _out, err = finish(popen_cli(sd_home, "status"))
    assert code == 2 and "tools takes `loading: lazy|eager`" in err and "Traceback" not in err


@BOTH
def test_mcp_tools_are_indexed_unless_the_server_is_eager(
    scheme: Scheme, sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    servers = {
        name: {"command": sys.executable, "args": ["-m", "tests.mcp_servers", name],
               "cwd": str(Path.cwd()), "default": True, "effect": "read", **extra}
        for name, extra in (("lazysrv", {}), ("eagersrv", {"eager": True}))
    }  # fmt: skip
    (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    model = provider(sd_home, fake_llm, scheme)
    echo = ReplyToolCall("lazysrv__echo", {"text": "hi"})
    fake_llm.set_script(
        lambda r: load(r, "lazysrv__echo", "lazysrv echo", echo) if r.turn < 1 else Reply(text="ok")
    )
    code, _, err = finish(popen_cli(sd_home, "run", "use mcp", "--model", model, "--mode",
                                    "code", "--workdir", str(workdir)), timeout=120)  # fmt: skip
    assert code == 0, err
    first, second = asked(fake_llm)[:2]
    shown = tool_names(first)
    assert "eagersrv__echo" in shown and not any(n.startswith("lazysrv") for n in shown)
    assert ("lazysrv__echo" in deferred_names(first)) is scheme.vendor
    # The index names the server, but where the vendor shows it as a namespace.
    assert ("- lazysrv (MCP, " in system_text(first)) is (scheme != RESPONSES)
    assert "lazysrv__echo" in loaded(second)
    if scheme == RESPONSES:  # a server's deferred tools are one namespace, named in the call
        spaces = {t["name"]: t for t in first.body["tools"] if t.get("type") == "namespace"}
        assert sorted(spaces) == ["lazysrv", "swarmdeck__tools"]
        assert "MCP server lazysrv's 7 tools (lazysrv__echo, " in spaces["lazysrv"]["description"]
        calls = [i for i in second.body["input"] if i.get("type") == "function_call"]
        assert (calls[-1]["name"], calls[-1]["namespace"]) == ("lazysrv__echo", "lazysrv")
