"""SIGKILL between a step's workspace snapshot and its journal entry, then the session
taken over on another host (another home, the same store): the new host restores the
files as of the last journaled step, so the files and the journal never disagree, and the
`once` step is reported interrupted, not run again. On both stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.testing.script import Reply
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    expect_killed,
    finish,
    open_catalog,
    popen_python,
    text,
)

pytestmark = pytest.mark.chaos

PROGRAM = """
import asyncio
import sys

from swarmdeck import AgentSpec, Swarm


async def main() -> None:
    command, arg, workdir = sys.argv[1], sys.argv[2], sys.argv[3]
    options = {"workspace": "store", "no_sandbox": True}
    async with Swarm() as swarm:
        if command == "start":
            spec = AgentSpec("fake", mode="code", options=options)
            session = await swarm.start(arg, spec, workdir=workdir)
        else:
            swarm.recover()
            session = swarm.session(arg)
        print((await session.result(timeout=60)).status)


asyncio.run(main())
"""


def test_a_snapshot_whose_step_never_reached_the_journal_is_passed_over(
    store: Store, sd_home: Path, tmp_path: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    host_b = tmp_path / "home-b"
    host_b.mkdir(mode=0o700)
    write_provider(host_b, "fake", fake_llm.openai_base_url)
    half = call("shell", argv=["sh", "-c", "echo half > b.txt"])
    fake_llm.set_script(
        Scripted(
            {
                "two steps": Agent(
                    [
                        Reply(tool_calls=(call("write_file", path="a.txt", content="one\n"),)),
                        Reply(tool_calls=(half,)),
                        text("done"),
                    ]
                )
            }
        )
    )
    program = tmp_path / "workspace_program.py"
    program.write_text(PROGRAM)
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("submitted\n")
    # Killed after the shell step's snapshot was recorded, before its result was journaled.
    start = popen_python(
        sd_home, program, "start", "two steps", str(work), SWARMDECK_CRASH_AT="tool.snapshotted:2"
    )
    expect_killed(start)
    catalog = open_catalog()
    (session,) = catalog.list_sessions()
    refs = dict(catalog.refs_of(session.id))
    first_step, cut_step = (key for key in refs if key.startswith("tool:"))
    assert not catalog.events(session.id, kinds=["tool_result"])[1:]  # only the write's

    on_b = {"SWARMDECK_STORE": store.url}
    code, out, err = finish(popen_python(host_b, program, "recover", session.id, str(work), **on_b))
    assert (code, out.strip()) == (0, "completed"), err
    results = [e.payload for e in catalog.events(session.id, kinds=["tool_result"])]
    assert "interrupted" in results[-1]["content"]  # the `once` step did not run again
    after = catalog.refs_of(session.id)
    assert after[-1][0].startswith("restored:") and after[-1][1] == refs[first_step]
    assert refs[cut_step] != refs[first_step]

    pulled = tmp_path / "pulled"
    res = run_cli(host_b, "sessions", "pull", session.id, str(pulled), **on_b)
    assert res.code == 0, res.stderr
    assert (pulled / "a.txt").read_text() == "one\n"
    assert (pulled / "keep.txt").read_text() == "submitted\n"
    assert not (pulled / "b.txt").exists()  # the half-step's file is nowhere
    assert not (host_b / "workspaces" / "trees" / session.id / "b.txt").exists()
