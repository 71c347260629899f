"""Named agents, skills, discovery and turn origins in real sessions (the SDK and the CLI,
real HTTP to the fake LLM): the base agent opens every prompt; `tools:` filters; skills are
indexed and loaded, their tools offered from the next turn; spawn_agent by name and by
model; a cron-started turn cannot run a guarded tool and a person's can; a quiet check
tick wakes no model."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarmdeck import AgentSpec, Swarm
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    await_for,
    call,
    calls,
    status_is,
    text,
    tool_results,
)
from tests.plugins.support import agent_file, seed, write


def tool_names(req: object) -> set[str]:
    """The tools a request (scripted or recorded) offered."""
    return {t["function"]["name"] for t in req.body.get("tools", [])}  # type: ignore[attr-defined]


def system_text(req: object) -> str:
    """The system prompt of a request (scripted or recorded)."""
    return str(req.body["messages"][0]["content"])  # type: ignore[attr-defined]


def first_user(req: object) -> str:
    """The first user message of a recorded request."""
    messages = req.body["messages"]  # type: ignore[attr-defined]
    return next(str(m["content"]) for m in messages if m["role"] == "user")


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    folder = tmp_path / "myplugin"
    agent_file(
        folder,
        "reviewer",
        "name: reviewer\ndescription: Reviews a file.\ntools: [view, list_dir]\n"
        "initialPrompt: Review README.md now.\nmood: grumpy\n",
        "You are a careful reviewer.",
    )
    agent_file(folder, "helper", "name: helper\ndescription: Helps.\nskills: [tidy]\n", "Help.")
    write(
        folder / "skills/tidy/SKILL.md",
        "---\nname: tidy\ndescription: Tidying files up.\n---\nAlways tidy up.\n",
    )
    write(folder / "skills/tidy/tools.json", '{"tools": ["get_system_stats"]}')
    write(
        folder / "skills/stats/SKILL.md",
        "---\nname: stats\ndescription: Reading the store's statistics.\n---\nUse the stats.\n",
    )
    write(folder / "skills/stats/tools.json", '{"tools": ["get_system_stats"]}')
    return folder


@pytest.fixture
def swarm(sd_home: Path, fake_llm, plugin: Path) -> Iterator[Swarm]:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    s = Swarm(plugins=[plugin])
    yield s
    s.close()


async def test_named_agent_prompt_tools_and_first_message(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    fake_llm.set_script(lambda req: text("reviewed"))
    session = await swarm.start(None, AgentSpec("fake", agent="reviewer"), workdir=workdir)
    res = await session.result(timeout=30)
    assert res.status == "completed" and res.text == "reviewed"
    req = fake_llm.requests[0]
    prompt = system_text(req)
    # The base agent's body first, then the agent's own, then the skill index.
    assert prompt.startswith("You are a durable swarmdeck session")
    assert prompt.index("durable swarmdeck session") < prompt.index("You are a careful reviewer.")
    assert "- stats: Reading the store's statistics." in prompt
    assert first_user(req) == "Review README.md now."  # initialPrompt is the first message
    names = tool_names(req)
    # `view` resolved to read_file; list_dir; the base agent's and the runtime's own tools.
    assert {"read_file", "list_dir", "write_artifact", "wait", "load_skill"} <= names
    assert not {"shell", "write_file", "get_system_stats", "cleanup_session"} & names
    record = swarm.host.catalog.get_session(session.id)
    assert record.agent == "reviewer" and record.title == "reviewer"


async def test_skills_load_durably_and_bring_tools_from_the_next_turn(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    seen: dict[int, set[str]] = {}

    def load_then_use(req: FakeRequest) -> Reply:
        seen[req.turn] = tool_names(req)
        if req.turn == 0:
            # The skill's tool in the same turn as the load: not yet offered.
            return calls(call("load_skill", name="stats"), call("get_system_stats"))
        if req.turn == 1:
            return calls(call("get_system_stats"))
        return text("done: " + tool_results(req)[-1][:40])

    fake_llm.set_script(load_then_use)
    session = await swarm.start("check the store", AgentSpec("fake"), workdir=workdir)
    res = await session.result(timeout=30)
    assert res.status == "completed", res
    results = [e.payload for e in swarm.host.catalog.events(session.id, kinds=["tool_result"])]
    assert results[0]["content"].startswith("skill stats loaded. Its tools are yours from")
    assert "Use the stats." in results[0]["content"]
    assert results[1]["content"] == "error: no tool named get_system_stats in this session"
    assert json.loads(results[2]["content"])["sessions"] >= 1
    assert "get_system_stats" not in seen[0] and "get_system_stats" in seen[1]

    # A preloaded skill (front matter `skills:`) is in the prompt and brings its tools.
    fake_llm.set_script(lambda req: text("helped"))
    fake_llm.reset_stats()
    helper = await swarm.start("help", AgentSpec("fake", agent="helper"), workdir=workdir)
    await helper.result(timeout=30)
    req = fake_llm.requests[0]
    assert "## Skill: tidy\n\nAlways tidy up." in system_text(req)
    assert "get_system_stats" in tool_names(req)


async def test_spawn_by_name_and_by_model_and_discovery(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    script = Scripted(
        {
            "Review README.md now.": Agent([text("child reviewed")]),
            "coordinate": Agent(
                [
                    calls(call("list_agents"), call("list_available_models")),
                    calls(
                        call("spawn_agent", agent_name="reviewer"),
                        call("spawn_agent", task="x", model="openai:gpt-5"),
                        call("spawn_agent", task="x", model="fake:other"),
                        call("spawn_agent", agent_name="sweeper"),
                        call("spawn_agent", agent_name="nobody"),
                    ),
                    calls(call("wait_for_agents", timeout=30)),
                    text("coordinated"),
                ]
            ),
        }
    )
    fake_llm.set_script(script)
    session = await swarm.start("coordinate", AgentSpec("fake"), workdir=workdir)
    res = await session.result(timeout=30)
    assert res.status == "completed", res
    results = [
        e.payload["content"] for e in swarm.host.catalog.events(session.id, kinds=["tool_result"])
    ]
    agents, models = results[0], json.loads(results[1])
    assert "- reviewer: Reviews a file. (given)" in agents
    assert "- sweeper: " in agents and "[system agent" in agents
    names = [m["name"] for m in models]
    # The ready providers only: the fake one, and packaged ones that need no key.
    assert "fake:scripted" in names and "openai:gpt-5" not in names
    fake = next(m for m in models if m["name"] == "fake:scripted")
    assert fake["context_tokens"] == 128000
    assert results[2].startswith("started sub-agent ")
    assert results[3].startswith("error: model 'openai:gpt-5' is not available; use one of: ")
    assert "fake:scripted" in results[3]
    assert results[4].startswith("error: model 'fake:other' is not available")
    assert results[5] == (
        "error: sweeper is a system agent: it runs by itself as sys-sweeper, once per store, "
        "and is never spawned"
    )
    assert results[6].startswith("error: no agent named nobody (known: ")
    kids = swarm.host.catalog.list_sessions(parent_id=session.id)
    assert [k.agent for k in kids] == ["reviewer"] and kids[0].final_text == "child reviewed"


async def test_a_cron_started_turn_cannot_run_a_guarded_tool_a_persons_can(
    sd_home: Path, fake_llm, workdir: Path, tmp_path: Path
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    folder = tmp_path / "ops"
    agent_file(
        folder,
        "ops",
        "name: ops\ndescription: ops\ntools: [force_terminate_session, compact_database, "
        "scale_workers]\n",
        "Operate.",
    )

    def guarded(req: FakeRequest) -> Reply:
        if req.messages[-1].get("role") == "tool":
            return text("tried")
        return calls(
            call("compact_database"),
            call("scale_workers", processes=2),
            call("force_terminate_session", session_id="nobody"),
        )

    fake_llm.set_script(
        Scripted(
            {
                "operate": Agent(
                    [calls(call("cron", seconds=0.2, reason="tick")), text("armed")]
                    + [guarded] * 2
                    + [calls(call("cancel_cron")), text("stopped")]
                    + [guarded] * 2,
                )
            }
        )
    )
    swarm = Swarm(plugins=[folder])
    try:
        session = await swarm.start(
            "operate", AgentSpec("fake", agent="ops", persistent=True), workdir=workdir
        )
        catalog = swarm.host.catalog
        await await_for(
            lambda: (
                [e.payload["text"] for e in catalog.events(session.id, kinds=["assistant"])][-1:]
                == ["stopped"]
            ),
            timeout=30,
        )
        await await_for(status_is(catalog, session.id, "idle"))
        cron_results = [e.payload for e in catalog.events(session.id, kinds=["tool_result"])]
        await session.send("please compact the database and scale to 2")
        await await_for(
            lambda: len(catalog.events(session.id, kinds=["tool_result"])) >= len(cron_results) + 3,
            timeout=30,
        )
    finally:
        await swarm.aclose()
    turns = {e.key: e.payload for e in catalog.events(session.id, kinds=["assistant"])}
    assert turns["turn:0"]["origin"] == "person" and turns["turn:2"]["origin"] == "cron"
    guarded_cron = [r for r in cron_results if r["name"] != "cron" and r["name"] != "cancel_cron"]
    assert len(guarded_cron) == 3
    for r in guarded_cron:
        assert r["permission_denied"] and "this turn was started by a cron tick" in r["content"]
    by_person = [e.payload for e in catalog.events(session.id, kinds=["tool_result"])][-3:]
    compact, scale, terminate = by_person
    assert compact["content"].startswith("compacted the database: ")
    assert scale["content"] == (
        "error: no live worker supervisor: scaling needs `swarmdeck worker --processes N` running"
    )
    assert terminate["content"] == "error: no session nobody"
    audits = [e.payload["action"] for e in catalog.events(session.id, kinds=["audit"])]
    assert audits == ["compact_database"]


async def test_a_quiet_check_tick_wakes_no_model(
    sd_home: Path, fake_llm, workdir: Path, tmp_path: Path
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    folder = tmp_path / "quiet"
    agent_file(
        folder,
        "watcher",
        "name: watcher\ndescription: watches\ntools: [scan_completed_sessions]\n"
        "initialPrompt: watch the store\n"
        "cron: {seconds: 0.1, reason: sweep, check: scan_completed_sessions}\n",
        "Watch.",
    )
    script = Scripted({"watch the store": Agent([text("watching")], rest="woken")})
    fake_llm.set_script(script)
    swarm = Swarm(plugins=[folder])
    try:
        session = await swarm.start(None, AgentSpec("fake", agent="watcher"), workdir=workdir)
        catalog = swarm.host.catalog
        await await_for(
            lambda: (
                (catalog.get_session(session.id).options["cron"] or {}).get("quiet_ticks", 0) >= 10
            ),
            timeout=30,
            what="ten quiet ticks",
        )
        events_quiet = len(catalog.events(session.id))
        assert script.asked["watch the store"] == 1
        assert catalog.events(session.id, kinds=["timer"]) == []
        # Something to clean: the next tick wakes the model, with what the check found.
        seed(catalog, "stale-one", status="completed", ago=3600)
        await await_for(
            lambda: catalog.events(session.id, kinds=["timer"]), timeout=30, what="a waking tick"
        )
        tick = catalog.events(session.id, kinds=["timer"])[0].payload["text"]
        assert tick.startswith("cron tick: sweep\nscan_completed_sessions found:\n1 session tree")
        assert "- stale-one completed" in tick
        await await_for(lambda: script.asked["watch the store"] >= 2, timeout=30)
        assert events_quiet <= 3  # task, the first turn, its status: nothing per quiet tick
    finally:
        await swarm.aclose()


def test_run_agent_from_the_cli(sd_home: Path, fake_llm, plugin: Path, workdir: Path) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(lambda req: text(f"reviewed: {req.task}"))
    res = run_cli(
        sd_home,
        "run",
        "--agent",
        "reviewer",
        "--model",
        "fake",
        "--plugin",
        str(plugin),
        "--workdir",
        str(workdir),
    )
    assert res.code == 0, res.stderr
    assert res.stdout.strip() == "reviewed: Review README.md now."
    refused = run_cli(sd_home, "run", "--agent", "sweeper", "--model", "fake")
    assert refused.code == 2 and "sweeper is a system agent" in refused.stderr
    missing = run_cli(sd_home, "run", "--agent", "nobody", "--model", "fake")
    assert missing.code == 2 and "no agent named nobody" in missing.stderr


async def test_a_persons_message_ends_a_wait_and_is_answered_first(
    swarm: Swarm, fake_llm, workdir: Path
) -> None:
    def waiter(req: FakeRequest) -> Reply:
        if req.turn == 0:
            return calls(call("wait", seconds=600, reason="nap"))
        return text("answered: " + str(req.messages[-1]["content"])[:60])

    fake_llm.set_script(waiter)
    session = await swarm.start("nap", AgentSpec("fake", persistent=True), workdir=workdir)
    catalog = swarm.host.catalog
    await await_for(status_is(catalog, session.id, "waiting"))
    started = time.monotonic()
    await session.send("stop napping")
    res = await session.result(timeout=30)
    assert time.monotonic() - started < 10
    results = [e.payload["content"] for e in catalog.events(session.id, kinds=["tool_result"])]
    assert results == ["wait ended early (nap): a message arrived; read it and answer it first"]
    assert res.text == "answered: stop napping"
    turn = catalog.events(session.id, kinds=["assistant"])[-1]
    assert turn.payload["origin"] == "person"
