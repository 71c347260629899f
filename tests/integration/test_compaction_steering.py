"""Compaction the user can steer: the storm guard on a history that cannot be shrunk, a
person's `sessions compact` (at the next turn boundary, and at once on a resting session),
and an agent's own threshold in its front matter, validated."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from swarmdeck.runtime.host import Host, SessionRequest, default_tools
from swarmdeck.runtime.steering import GUARD_TURNS
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from tests.conftest import run_cli, write_provider
from tests.integration.context_support import is_summary_request
from tests.integration.test_fleet_support import Fleet
from tests.integration.test_sessions_support import await_for, open_catalog, status_is, wait_for
from tests.plugins.support import agent_file

# 20,000 tokens, 1,000 kept for the answer: compaction starts at 14,250 (75 %).
CONTEXT, OUTPUT, WINDOW = 20_000, 1_000, 19_000
LOOK = Reply(text="", tool_calls=(ReplyToolCall("read_file", {"path": "app.py"}),))
SUMMARY = Reply(text="Summary: the agent read app.py, which holds main() returning 42.")


class Model:
    """Reads app.py for `looks` turns, then answers; answers summary requests; counts both."""

    def __init__(self, looks: int, on_turn: Any = None) -> None:
        self.looks = looks
        self.turns = itertools.count()
        self.asked = 0
        self.summaries = 0
        self.on_turn = on_turn

    def __call__(self, req: FakeRequest) -> Reply:
        if is_summary_request(req):
            self.summaries += 1
            return SUMMARY
        turn = next(self.turns)
        self.asked += 1
        if self.on_turn is not None:
            self.on_turn(turn)
        return LOOK if turn < self.looks else Reply(text="Done: main returns 42.")


async def run_session(workdir: Path, task: str, options: dict[str, Any]) -> tuple[Host, str]:
    """Run a session in this process until it completes or rests; (host, id)."""
    host = Host(tools=default_tools())
    record = host.create_session(SessionRequest(task, "fake", workdir, options=options))
    host.launch()
    try:
        await host.start(record.id)
        await await_for(status_is(host.catalog, record.id, "completed", "failed", "idle"), 120)
    finally:
        await host.aclose()
    return host, record.id


def _events(host: Host, sid: str, kind: str) -> list[Any]:
    return host.catalog.events(sid, kinds=[kind])


async def test_the_guard_holds_on_a_history_that_cannot_be_shrunk(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url,
                   context_tokens=CONTEXT, output_tokens=OUTPUT)  # fmt: skip
    # The task alone is past the threshold, and a task is never compacted: each compaction
    # frees only a few small tool results.
    task = "Read app.py again and again. " + "background " * 13_000
    model = Model(looks=8)
    fake_llm.set_script(model)
    host, sid = await run_session(workdir, task, {"max_turns": 20})
    assert host.catalog.get_session(sid).status == "completed"
    compactions = _events(host, sid, "compaction")
    # Turn 2 is the first with anything to compact; then the guard holds GUARD_TURNS turns.
    assert [c.payload["turn"] for c in compactions] == [2, 2 + GUARD_TURNS + 1]
    # (A summary longer than what it replaced frees less than nothing.)
    assert all(c.payload["freed"] < WINDOW // 10 for c in compactions)
    assert model.summaries == 2 and model.asked == 9
    [note] = _events(host, sid, "context_note")
    assert note.payload["text"].startswith("not compacting: the compaction before turn 2 freed")
    shown = run_cli(sd_home, "sessions", "show", sid).stdout
    assert "not compacting" in " ".join(shown.split())


async def test_sessions_compact_at_the_next_boundary_and_on_a_resting_session(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url,
                   context_tokens=CONTEXT, output_tokens=OUTPUT)  # fmt: skip
    sid_box: list[str] = []

    def ask_during_turn(turn: int) -> None:
        # A real `swarmdeck` process asks while turn 2 runs; turn 3 takes the request.
        if turn == 2:
            res = run_cli(sd_home, "sessions", "compact", sid_box[0][:12])
            assert res.code == 0 and json.loads(res.stdout)["requested"], res.stderr

    model = Model(looks=4, on_turn=ask_during_turn)
    fake_llm.set_script(model)
    host = Host(tools=default_tools())
    request = SessionRequest("Read app.py a few times.", "fake", workdir,
                             options={"one_shot": False})  # fmt: skip
    record = host.create_session(request)
    sid_box.append(record.id)
    host.launch()
    try:
        await host.start(record.id)
        await await_for(status_is(host.catalog, record.id, "idle"), 120)
        [asked] = _events(host, record.id, "compaction")
        # Far below the threshold, and compacted all the same, before turn 3.
        assert (asked.payload["why"], asked.payload["turn"]) == ("asked", 3)
        assert model.summaries == 1
        # At rest: compacted at once, with no model turn.
        turns = model.asked
        res = run_cli(sd_home, "sessions", "compact", record.id)
        assert res.code == 0, res.stderr
        await await_for(lambda: len(_events(host, record.id, "compaction")) == 2, 60)
        await await_for(status_is(host.catalog, record.id, "idle"), 30)
        assert model.asked == turns and model.summaries == 2
        assert len(_events(host, record.id, "compact")) == 2
    finally:
        await host.aclose()
    shown = " ".join(run_cli(sd_home, "sessions", "show", record.id).stdout.split())
    assert "as a person asked" in shown


def test_sessions_compact_reaches_a_session_a_fleet_worker_rests(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM, fleet: Fleet
) -> None:
    """The request comes from a process without an engine: the worker that runs the
    session rings it (as it does a person's message), and it compacts at once."""
    write_provider(sd_home, "fake", fake_llm.openai_base_url,
                   context_tokens=CONTEXT, output_tokens=OUTPUT)  # fmt: skip
    model = Model(looks=2)
    fake_llm.set_script(model)
    fleet.start("host-a")
    request = SessionRequest("Read app.py twice.", "fake", workdir, options={"one_shot": False})
    sid = Host().create_session(request, fleet=True).id
    catalog = open_catalog()
    wait_for(lambda: catalog.get_session(sid).status == "idle", timeout=60, what="its rest")
    turns = model.asked
    res = run_cli(sd_home, "sessions", "compact", sid)
    assert res.code == 0, res.stderr
    wait_for(
        lambda: len(catalog.events(sid, kinds=["compaction"])) == 1,
        timeout=20,  # its rest's recv would otherwise wait an hour
        what="the compaction a person asked for",
    )
    assert model.asked == turns and model.summaries == 1


def test_sessions_compact_refuses_what_cannot_compact(sd_home: Path) -> None:
    res = run_cli(sd_home, "sessions", "compact", "nosuchsession")
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr


def test_an_agent_sets_its_threshold_in_front_matter(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url,
                   context_tokens=CONTEXT, output_tokens=OUTPUT)  # fmt: skip
    fake_llm.set_script(Model(looks=4))
    project = workdir / ".swarmdeck"
    agent_file(project, "early", "description: reads early\ncompactAt: 20%")
    task = "Read app.py. " + "context " * 2_500
    res = run_cli(sd_home, "run", task, "--agent", "early", "-m", "fake", "-C", str(workdir))
    assert res.code == 0, res.stderr
    plain = run_cli(sd_home, "run", task, "-m", "fake", "-C", str(workdir))
    assert plain.code == 0, plain.stderr
    rows = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    compacted = {
        r["agent"]: len([e for e in _show_events(sd_home, r["id"]) if e["kind"] == "compaction"])
        for r in rows
    }
    # At 20 % of the window the agent compacts; the provider's 75 % never does here.
    assert compacted[None] == 0 and compacted["early"] >= 1, compacted


def _show_events(home: Path, sid: str) -> list[dict[str, Any]]:
    res = run_cli(home, "sessions", "show", sid, "--json")
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)["events"]


def test_a_bad_threshold_is_one_line_naming_the_field(sd_home: Path, workdir: Path) -> None:
    project = workdir / ".swarmdeck"
    agent_file(project, "eager", "description: compacts too soon\ncompactAt: 10%")
    res = run_cli(sd_home, "run", "go", "--agent", "eager", "-m", "fake", "-C", str(workdir))
    assert res.code == 2 and "Traceback" not in res.stderr
    [line] = res.stderr.strip().splitlines()
    assert "eager.agent.md: field 'compactAt': must be between 20% and 95%" in line, line
    check = run_cli(sd_home, "agents", "validate", str(project))
    assert check.code == 2 and "must be between 20% and 95% of the window" in check.stdout
