"""A root session's kept executor (issue 35 item 4) stops when the session ends, not an
idle period later: its commands shared one executor, and none is left running after."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.runtime.host import Host, SessionRequest, default_tools
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import Reply, ReplyToolCall
from swarmdeck.tools.jail import executors
from swarmdeck.tools.sandbox import detect_sandbox
from tests.conftest import write_provider
from tests.integration.test_sessions_support import await_for, status_is

pytestmark = pytest.mark.sandbox


def shell(*argv: str) -> Reply:
    return Reply(text="", tool_calls=(ReplyToolCall("shell", {"argv": list(argv)}),))


async def test_a_root_sessions_executor_stops_when_it_ends(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    if detect_sandbox().kind == "none":
        pytest.skip("no sandbox here: commands run without a kept executor")
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    host = Host(tools=default_tools())
    record = host.create_session(SessionRequest("Run two commands.", "fake", workdir, mode="code"))
    run_dir = str(Path(record.run_dir).resolve())
    replies = iter([shell("true"), shell("echo", "again"), Reply(text="Done.")])
    running_at_each_turn: list[list[int]] = []

    def model(_req: object) -> Reply:
        running_at_each_turn.append(executors.running(run_dir))
        return next(replies)

    fake_llm.set_script(model)
    before = executors.started()
    host.launch()
    try:
        await host.start(record.id)
        await await_for(status_is(host.catalog, record.id, "completed", "failed"), 120)
    finally:
        await host.aclose()
    assert host.catalog.get_session(record.id).status == "completed"
    # The first command started the executor, the second reused it, the end stopped it.
    assert executors.started() - before == 1
    none, first, second = running_at_each_turn
    assert none == [] and len(first) == 1 and second == first
    assert executors.running(run_dir) == []
