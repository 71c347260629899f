"""Tools on demand (issue 34, item 1), on both wire formats through the real SDKs: the
prompt carries the core schemas and an index of the rest; `load_tools` brings a schema in,
it stays loaded across a SIGKILL and a resume, after the schemas shown before it (so the
prefix a cache keeps does not change); MCP servers' tools are indexed unless `eager`; the
`eager` setting sends everything."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from tests.conftest import write_provider
from tests.integration.test_sessions_support import expect_killed, finish, open_catalog, popen_cli

CODE_CORE = ["read_file", "grep", "write_file", "edit_file", "shell", "submit_result"]
KINDS = ["openai", "anthropic"]


def asked(fake: FakeLLM) -> list[FakeRequest]:
    """The model calls the fake server received, in order, as scripts see them."""
    return [
        FakeRequest.from_body("anthropic" if r.path.endswith("/messages") else "openai", r.body)
        for r in fake.requests
        if r.method == "POST" and isinstance(r.body, dict)
    ]


def tool_names(request: FakeRequest) -> list[str]:
    """The names of the tools whose schemas a request carried, in order."""
    tools = request.body.get("tools") or []
    return [t.get("name") or t["function"]["name"] for t in tools]


def system_text(request: FakeRequest) -> str:
    if request.api == "anthropic":
        system = request.body.get("system")
        return system if isinstance(system, str) else "".join(b["text"] for b in system)
    return str(request.messages[0]["content"])


def provider(home: Path, fake: FakeLLM, kind: str, **fields: Any) -> str:
    url = fake.openai_base_url if kind == "openai" else fake.anthropic_base_url
    # The plain edit shape on both wires: edit_file is the core edit tool either way.
    write_provider(home, "fake", url, kind=kind, edit_tools="plain", **fields)
    return "fake:scripted"


def load_then_list(request: FakeRequest) -> Reply:
    """Load list_dir, use it, then finish."""
    if request.turn == 0:
        return Reply(tool_calls=(ReplyToolCall("load_tools", {"names": ["list_dir"]}),))
    if request.turn == 1:
        return Reply(tool_calls=(ReplyToolCall("list_dir", {"path": "."}),))
    return Reply(text="listed")


@pytest.mark.parametrize("kind", KINDS)
def test_the_prompt_carries_the_core_and_an_index(
    kind: str, sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    model = provider(sd_home, fake_llm, kind)
    fake_llm.set_script(load_then_list)
    code, _out, err = finish(popen_cli(sd_home, "run", "look around", "--model", model,
                                      "--mode", "code", "--workdir", str(workdir)))  # fmt: skip
    assert code == 0, err
    first, second, third = asked(fake_llm)[:3]
    assert tool_names(first) == [*CODE_CORE, "load_tools"]
    index = system_text(first)
    assert "- list_dir: List a directory" in index and "- spawn_agent:" in index
    # Loaded: after every schema shown before, so the tools block only grew at its end.
    assert tool_names(second) == [*CODE_CORE, "load_tools", "list_dir"]
    assert tool_names(third)[: len(tool_names(second))] == tool_names(second)
    assert system_text(second) == index  # the index never changes: the prefix stays cached
    assert "README.md" in third.last_tool_result


@pytest.mark.parametrize("kind", KINDS)
def test_a_loaded_tool_stays_loaded_across_a_sigkill(
    kind: str, sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    model = provider(sd_home, fake_llm, kind)
    fake_llm.set_script(load_then_list)
    sid = Host().create_session(SessionRequest("look around", model, workdir, mode="code")).id
    # Killed as turn 1 is about to be asked: the load is journaled, nothing held in memory.
    expect_killed(popen_cli(sd_home, "sessions", "resume", sid, SWARMDECK_CRASH_AT="llm.before:2"))
    assert len(asked(fake_llm)) == 1
    code, _, err = finish(popen_cli(sd_home, "sessions", "resume", sid))
    assert code == 0, err
    resumed = asked(fake_llm)[1]
    assert resumed.turn == 1 and "list_dir" in tool_names(resumed)
    results = open_catalog().events(sid, kinds=["tool_result"])
    assert [r.payload["name"] for r in results] == ["load_tools", "list_dir"]
    assert not any(r.payload["is_error"] for r in results)


def test_load_tools_refuses_a_name_it_does_not_know_and_searches_by_words(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    model = provider(sd_home, fake_llm, "openai")
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
    model = provider(sd_home, fake_llm, "openai")
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


def test_mcp_tools_are_indexed_unless_the_server_is_eager(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    servers = {
        name: {"command": sys.executable, "args": ["-m", "tests.mcp_servers", name],
               "cwd": str(Path.cwd()), "default": True, "effect": "read", **extra}
        for name, extra in (("lazysrv", {}), ("eagersrv", {"eager": True}))
    }  # fmt: skip
    (workdir / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    model = provider(sd_home, fake_llm, "openai")
    calls = [ReplyToolCall("load_tools", {"names": ["lazysrv__echo"]})]
    fake_llm.set_script(
        lambda r: Reply(tool_calls=(calls[r.turn],)) if r.turn < 1 else Reply(text="ok")
    )
    code, _, err = finish(popen_cli(sd_home, "run", "use mcp", "--model", model, "--mode",
                                    "code", "--workdir", str(workdir)), timeout=120)  # fmt: skip
    assert code == 0, err
    first, second = asked(fake_llm)[:2]
    shown = tool_names(first)
    assert "eagersrv__echo" in shown and not any(n.startswith("lazysrv") for n in shown)
    assert "- lazysrv (MCP, " in system_text(first)
    assert tool_names(second)[-1] == "lazysrv__echo"
