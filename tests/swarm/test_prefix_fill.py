"""A family whose shared prefix is under the shortest one the provider's cache keeps
(issue 34, item 2): its prefix is filled up to it with the schemas it would index, and its
first request goes alone, so that its siblings' first requests are served the prefix
instead of each paying for all of it; a parent whose sub-agents share its prompt is filled
as they are, so its own turns are cached and write the prefix its children read. Read
from the fake server's cache, which keeps a prefix only once the answer to it begins (as
the vendors' caches do)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from swarmdeck import AgentSpec, Swarm
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.prompt_cache import DEFAULT_MIN_CACHED_TOKENS, prompt_tokens
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from swarmdeck.tools.tool_index import DEFAULT_CORE, LOAD_TOOLS
from tests.conftest import write_provider

CHILDREN = 5


def answer(req: FakeRequest) -> Reply:
    if "CHILD-" in req.task:
        return Reply(text="main returns 42")
    if req.turn == 0:
        spawns = [ReplyToolCall("spawn_agent", {"task": f"CHILD-{i}: read app.py"})
                  for i in range(CHILDREN)]  # fmt: skip
        return Reply(tool_calls=tuple(spawns))
    if req.turn == 1:
        return Reply(tool_calls=(ReplyToolCall("wait_for_agents", {"timeout": 60}),))
    return Reply(text="all answered")


def _shared_prefix(body: dict[str, Any]) -> tuple[list[Any], Any]:
    """A request's tools and system prompt: what the family's sessions share."""
    return body["tools"], body["messages"][0]


@pytest.mark.parametrize("fill", [True, False], ids=["filled", "provider-caches-any"])
async def test_a_fan_outs_short_prefix_is_filled_and_served_from_the_parents_turns(
    fill: bool, sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.latency = 0.3  # each answer begins this late: siblings sent at once all miss
    minimum = DEFAULT_MIN_CACHED_TOKENS if fill else 0
    write_provider(sd_home, "fake", fake_llm.openai_base_url, prompt_cache_min_tokens=minimum)
    fake_llm.set_script(answer)
    async with Swarm() as sdk:
        parent = await sdk.start("FAN OUT", AgentSpec("fake", mode="explore"), workdir=workdir)
        assert (await parent.result(timeout=120)).status == "completed"
        catalog = sdk.host.catalog
        kids = [s.id for s in catalog.list_sessions() if s.parent_id == parent.id]
        firsts = [catalog.events(k, kinds=["assistant"])[0].payload["usage"] for k in kids]
        parent_turns = [e.payload["usage"] for e in catalog.events(parent.id, kinds=["assistant"])]
    requests = [r.body for r in fake_llm.requests if r.method == "POST"]
    children = [b for b in requests if "CHILD-" in str(b["messages"][1]["content"])]
    assert len(kids) == CHILDREN == len(children)
    # Byte for byte the same tools and system prompt for every child, and for the parent.
    assert len({repr(_shared_prefix(b)) for b in children}) == 1
    assert repr(_shared_prefix(requests[0])) == repr(_shared_prefix(children[0]))
    shared = {"tools": children[0]["tools"], "messages": children[0]["messages"][:1]}
    cached = [u.get("cache_read", 0) for u in (*firsts, *parent_turns[1:])]
    if fill:
        # Schemas the prompt would only index fill the prefix to the minimum; the parent's
        # first turn caches it, and every child's first request and its own later turns
        # are served it.
        shown = {t["function"]["name"] for t in children[0]["tools"]}
        assert shown - {*DEFAULT_CORE["explore"], LOAD_TOOLS}, shown
        assert prompt_tokens("openai", shared) >= DEFAULT_MIN_CACHED_TOKENS
        assert parent_turns[0].get("cache_read", 0) == 0
        assert all(c >= DEFAULT_MIN_CACHED_TOKENS for c in cached), cached
    else:
        # Nothing filled where the provider caches any prefix; under the fake's 1,024,
        # no request is served.
        assert prompt_tokens("openai", shared) < DEFAULT_MIN_CACHED_TOKENS
        assert not any(cached), cached


def _member_answer(req: FakeRequest) -> Reply:
    if "MEMBER-" in req.task:
        result = {"facts": [{"fact": "main returns 42", "file_line": "app.py:2"}],
                  "truncated": False}  # fmt: skip
        return Reply(tool_calls=(ReplyToolCall("submit_result", {"result": result}),))
    if req.turn == 0:
        plan = {"members": [{"role": f"m{i}", "task": f"MEMBER-{i}: what does app.py return?",
                             "mode": "explore"} for i in range(3)]}  # fmt: skip
        return Reply(tool_calls=(ReplyToolCall("submit_plan", plan),))
    return Reply(text="merged")


async def test_members_of_one_mode_share_their_instructions_on_anthropic(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    """Anthropic caches only at breakpoints: a member's instructions, which open its first
    message before its own task, are a block of their own with one, and the members of one
    mode are served them from the first one's request (sent alone)."""
    fake_llm.latency = 0.3
    write_provider(sd_home, "fake", fake_llm.anthropic_base_url, kind="anthropic")
    fake_llm.set_script(_member_answer)
    async with Swarm() as sdk:
        doc = await sdk.coordinate("Find what main returns.", workdir=workdir, model="fake")
        assert doc["verdict"] == "completed", doc
        catalog = sdk.host.catalog
        members = [s.id for s in catalog.list_sessions() if s.parent_id == doc["session_id"]]
        firsts = [catalog.events(m, kinds=["assistant"])[0].payload["usage"] for m in members]
    bodies = [r.body for r in fake_llm.requests if "MEMBER-" in str(r.body.get("messages"))]
    first_blocks = [b["messages"][0]["content"] for b in bodies if len(b["messages"]) == 1]
    assert len(members) == 3 == len(first_blocks)
    for shared, own in first_blocks:
        assert "cache_control" in shared and "## Your" not in shared["text"]
        assert (
            own["text"].startswith("## Your role: m") and "## Your task\n\nMEMBER-" in own["text"]
        )
    assert len({blocks[0]["text"] for blocks in first_blocks}) == 1  # byte for byte
    served = sorted(u.get("cache_read", 0) for u in firsts)
    # All are served the coordinator's prefix (tools and system); all but the first, the
    # instructions too.
    assert served[0] >= DEFAULT_MIN_CACHED_TOKENS
    assert served[1] == served[2] > served[0] + 100, served


@pytest.mark.parametrize("max_children", [None, 0], ids=["may-spawn", "no-children"])
async def test_only_a_session_that_may_start_sub_agents_is_filled(
    max_children: int | None, sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    """A plain session is filled as the prefix it hands down; one whose limits leave it no
    sub-agent keeps its lean prompt."""
    write_provider(sd_home, "fake", fake_llm.openai_base_url,
                   prompt_cache_min_tokens=DEFAULT_MIN_CACHED_TOKENS)  # fmt: skip
    fake_llm.set_script(lambda req: Reply(text="done"))
    options = {} if max_children is None else {"max_children": max_children}
    async with Swarm() as sdk:
        spec = AgentSpec("fake", mode="explore", options=options)
        session = await sdk.start("LOOK", spec, workdir=workdir)
        assert (await session.result(timeout=60)).status == "completed"
    (body,) = [r.body for r in fake_llm.requests if r.method == "POST"]
    shown = {t["function"]["name"] for t in body["tools"]} - {LOAD_TOOLS}
    filled = shown - set(DEFAULT_CORE["explore"])
    assert bool(filled) == (max_children is None), shown
