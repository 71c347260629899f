"""The project's AGENTS.md reaches every session of a tree, inside the prefix the family
shares (runtime/project_docs.py, runtime/family.py): the coordinator and its members, a
parent and its sub-agents, read from the fake server's recorded requests; and
`project_docs: false` keeps it out; which parents hand their own prompt down."""

from __future__ import annotations

from pathlib import Path

from swarmdeck import AgentSpec, Swarm
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from swarmdeck.views.detail import context_line
from tests.conftest import write_provider
from tests.swarm.test_shared_prefix import answer, first_requests, prefix

RULES = "Run `make check` before you report; never edit generated/."


async def _tree(workdir: Path, fake_llm: FakeLLM) -> str:
    """A swarm and a fan-out in `workdir`; returns the fan-out parent's id."""
    fake_llm.set_script(answer)
    async with Swarm() as sdk:
        doc = await sdk.coordinate("Find what main returns.", workdir=workdir, model="fake")
        parent = await sdk.start("FAN out", AgentSpec("fake", mode="explore"), workdir=workdir)
        assert (await parent.result(timeout=60)).status == "completed"
    assert doc["verdict"] == "completed", doc
    return parent.id


async def test_every_session_of_a_tree_shares_the_projects_instructions(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    (workdir / "AGENTS.md").write_text(f"# Conventions\n\n{RULES}\n")
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    parent_id = await _tree(workdir, fake_llm)
    async with Swarm() as sdk:
        turn = sdk.host.catalog.events(parent_id, kinds=["assistant"])[0]
        line = context_line({**turn.payload["context"], "compactions": 0})
    # The project's words are counted apart from the runtime's own.
    assert turn.payload["context"]["runtime"]["project"] > 10
    assert line.endswith(f"project instructions {turn.payload['context']['runtime']['project']}")
    members = first_requests(fake_llm, "MEMBER-")
    coordinator = first_requests(fake_llm, "Find what main returns.")
    children = first_requests(fake_llm, "CHILD-")
    parent = first_requests(fake_llm, "FAN out")
    assert len(members) == 3 and len(children) == 3 and len(parent) == 1
    swarm = {prefix(*r) for r in [*members.values(), *coordinator.values()]}
    kids = {prefix(*r) for r in children.values()}
    assert len(swarm) == 1 and len(kids) == 1  # still one prefix per family
    for _tools, system in [*swarm, *kids, prefix(*next(iter(parent.values())))]:
        assert RULES in system and "From AGENTS.md:" in system
    for api, body in [*members.values(), *children.values()]:
        assert RULES not in FakeRequest.from_body(api, body).task  # the prefix, not the tail
    # A plain parent's sub-agents share its own prompt, byte for byte: their first requests
    # start with the prefix its own first request cached; being sub-agents opens their task.
    assert kids == {prefix(*next(iter(parent.values())))}
    for api, body in children.values():
        assert FakeRequest.from_body(api, body).task.startswith("You are a sub-agent")


async def test_the_instructions_can_be_turned_off(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    (workdir / "AGENTS.md").write_text(RULES)
    (sd_home / "settings.yaml").write_text("project_docs: false\n")
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    await _tree(workdir, fake_llm)
    assert not any(RULES in str(r.body) for r in fake_llm.requests)


async def test_a_parent_with_an_empty_core_set_still_shares_its_prompt(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    # Every tool of explore mode indexed, none shown whole: the children's family is built
    # with the same (empty) core set as the parent's own prompt, not the mode's default.
    (sd_home / "settings.yaml").write_text("tools:\n  core:\n    explore: []\n")
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    await _tree(workdir, fake_llm)
    children = first_requests(fake_llm, "CHILD-")
    parent = first_requests(fake_llm, "FAN out")
    assert {prefix(*r) for r in children.values()} == {prefix(*next(iter(parent.values())))}


async def test_a_parent_with_tools_of_its_own_hands_down_the_default_prompt(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    # Its own short list is not its children's tools: they share the default prompt, with
    # the note that they are sub-agents in it, not a copy that only looks like the parent's.
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(answer)
    own = ["read_file", "spawn_agent", "wait_for_agents"]
    spec = AgentSpec("fake", mode="explore", tool_names=own)
    async with Swarm() as sdk:
        parent = await sdk.start("FAN out", spec, workdir=workdir)
        assert (await parent.result(timeout=60)).status == "completed"
    children = {prefix(*r) for r in first_requests(fake_llm, "CHILD-").values()}
    assert len(children) == 1
    ((_tools, system),) = children
    assert "You are a sub-agent" in system
    assert children != {prefix(*next(iter(first_requests(fake_llm, "FAN out").values())))}


async def test_a_childs_own_prompt_opens_its_task_even_if_the_family_says_it_too(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    (workdir / "AGENTS.md").write_text(RULES)
    write_provider(sd_home, "fake", fake_llm.openai_base_url)

    def script(req: FakeRequest) -> Reply:
        if "CHILD-" in req.task:
            return Reply(text="child done")
        if req.turn == 0:
            spawn = {"task": "CHILD-0: look", "system_message": RULES}
            return Reply(tool_calls=(ReplyToolCall("spawn_agent", spawn),))
        if req.turn == 1:
            return Reply(tool_calls=(ReplyToolCall("wait_for_agents", {"timeout": 60}),))
        return Reply(text="done")

    fake_llm.set_script(script)
    async with Swarm() as sdk:
        parent = await sdk.start("FAN out", AgentSpec("fake", mode="explore"), workdir=workdir)
        assert (await parent.result(timeout=60)).status == "completed"
    [(api, body)] = first_requests(fake_llm, "CHILD-").values()
    assert RULES in prefix(api, body)[1]  # the project's words, in the family's prompt
    assert RULES in FakeRequest.from_body(api, body).task  # and its own, in its first message
