"""One cached prefix for a family of sessions (issue 34, item 2): a swarm's coordinator and
members, and a parent's sub-agents, send the same tools and system prompt byte for byte, on
both wire formats; what is each one's own opens its first message. Read from the fake
server's recorded requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from swarmdeck import AgentSpec, Swarm
from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing import responses_wire
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.prompt_cache import DEFAULT_MIN_CACHED_TOKENS
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from swarmdeck.testing.tool_search import searching
from tests.conftest import write_provider

PLAN = {"members": [{"role": f"m{i}", "task": f"MEMBER-{i}: look", "mode": mode}
                    for i, mode in enumerate(("explore", "review", "test"))]}  # fmt: skip


def answer(req: FakeRequest) -> Reply:
    task = req.task.split("## Your task\n\n")[-1]
    if "MEMBER-" in task:
        said = json.dumps(req.body)  # the mode is in the system prompt or the first message
        mode = next(m for m in ("explore", "review", "test") if f"in {m} mode" in said)
        result = RESULT_EXAMPLES[mode][0]
        return Reply(tool_calls=(ReplyToolCall("submit_result", {"result": result}),))
    if "CHILD-" in task:
        return Reply(text="child done")
    if "FAN out" in task:
        if req.turn == 0:
            calls = [ReplyToolCall("spawn_agent", {"task": f"CHILD-{i}: look"}) for i in range(3)]
            return Reply(tool_calls=tuple(calls))
        if req.turn == 1:
            return Reply(tool_calls=(ReplyToolCall("wait_for_agents", {"timeout": 60}),))
        return Reply(text="done")
    if req.turn == 0:
        return Reply(tool_calls=(ReplyToolCall("submit_plan", PLAN),))
    return Reply(text="merged")


def prefix(api: str, body: dict[str, Any]) -> tuple[str, str]:
    """What a request shares with its family: its tools and its system prompt."""
    tools = json.dumps([{k: v for k, v in t.items() if k != "cache_control"}
                        for t in body.get("tools", [])], sort_keys=True)  # fmt: skip
    if api == "anthropic":
        system = body["system"]
        text = system if isinstance(system, str) else "".join(b["text"] for b in system)
    else:
        text = body["messages"][0]["content"]
    return tools, text


def first_requests(fake: FakeLLM, marker: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The first request of each session whose task holds `marker`, by that task."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for r in fake.requests:
        if r.method != "POST" or not isinstance(r.body, dict):
            continue
        api = "anthropic" if r.path.endswith("/messages") else "openai"
        # A Responses request as the fake reads it: instructions the first message.
        responses = r.path.endswith("/responses")
        req = responses_wire.validate(r.body, frozenset()) if responses else (
            FakeRequest.from_body(api, r.body))  # fmt: skip
        task = req.task.split("## Your task\n\n")[-1]
        if marker in task and req.turn == 0:
            found.setdefault(task, (api, dict(req.body)))
    return found


@pytest.mark.parametrize("kind", ["openai", "anthropic", "openai-responses"])
async def test_a_swarm_and_a_fan_out_share_one_prefix(
    kind: str, sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    url = fake_llm.anthropic_base_url if kind == "anthropic" else fake_llm.openai_base_url
    write_provider(sd_home, "fake", url, kind=kind)
    fake_llm.set_script(searching(answer))
    async with Swarm() as sdk:
        doc = await sdk.coordinate("Find what main returns.", workdir=workdir, model="fake")
        parent = await sdk.start("FAN out", AgentSpec("fake", mode="explore"), workdir=workdir)
        assert (await parent.result(timeout=60)).status == "completed"
    assert doc["verdict"] == "completed", doc
    members = first_requests(fake_llm, "MEMBER-")
    coordinator = first_requests(fake_llm, "Find what main returns.")
    assert len(members) == 3 and len(coordinator) == 1
    shared = {prefix(*request) for request in [*members.values(), *coordinator.values()]}
    assert len(shared) == 1  # explore, review and test members, and their coordinator
    _tools, system = shared.pop()
    assert "MEMBER-" not in system and "m0" not in system
    assert "Find what main returns" not in system  # the swarm's own task: not every swarm's
    for task, (api, body) in members.items():
        first = FakeRequest.from_body(api, body).task
        assert first.index("## Your role") < first.index("## Your task") < first.index(task)
    children = first_requests(fake_llm, "CHILD-")
    assert len(children) == 3 and len({prefix(*r) for r in children.values()}) == 1
    if kind == "anthropic":  # the cache breakpoint closes the shared prefix
        _api, body = next(iter(members.values()))
        assert "cache_control" in json.dumps(body["system"])


async def test_the_prefix_can_be_turned_off(sd_home: Path, workdir: Path, fake_llm) -> None:
    (sd_home / "settings.yaml").write_text("tools:\n  shared_prefix: false\n")
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(searching(answer))
    async with Swarm() as sdk:
        doc = await sdk.coordinate("Find what main returns.", workdir=workdir, model="fake")
    assert doc["plan"]["error"] is None, doc  # the members ran (their results are not checked)
    members = first_requests(fake_llm, "MEMBER-")
    assert len({prefix(*r)[1] for r in members.values()}) == 3  # each its own system prompt


async def test_swarms_in_one_project_share_their_prefix(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    """No swarm's own task is in the prefix: a planner's next swarm in the project sends the
    same one, and its coordinator's first request is served what the first swarm cached."""
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(searching(answer))
    tasks = ("Find what main returns.", "Find what else main does.")
    async with Swarm() as sdk:
        docs = [await sdk.coordinate(t, workdir=workdir, model="fake") for t in tasks]
        second = sdk.host.catalog.events(docs[1]["session_id"], kinds=["assistant"])[0]
    assert [d["verdict"] for d in docs] == ["completed", "completed"], docs
    firsts = [next(iter(first_requests(fake_llm, t).values())) for t in tasks]
    assert prefix(*firsts[0]) == prefix(*firsts[1])
    assert second.payload["usage"].get("cache_read", 0) >= DEFAULT_MIN_CACHED_TOKENS
