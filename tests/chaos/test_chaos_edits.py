"""SIGKILL between an edit's write and its journal entry (the tool result), on both stores:
the rerun finds the file at the edit's after-hash and reports it done, never applying it
twice; a file changed by someone else meanwhile is at neither hash, and the model is told
the edit was interrupted."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.testing.script import Reply
from tests.conftest import Store, write_provider
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
    async with Swarm() as swarm:
        if command == "start":
            session = await swarm.start(arg, AgentSpec("fake", mode="code"), workdir=workdir)
        else:
            swarm.recover()
            session = swarm.session(arg)
        print((await session.result(timeout=60)).status)


asyncio.run(main())
"""
PATCH = "*** Begin Patch\n*** Update File: f.txt\n@@\n-ab\n+abc\n*** End Patch\n"


@pytest.mark.parametrize("meddled", [False, True], ids=["done", "interrupted"])
def test_an_edit_cut_off_after_its_write_is_never_applied_twice(
    store: Store, sd_home: Path, tmp_path: Path, fake_llm, meddled: bool
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(
        Scripted(
            {
                "edit f": Agent(
                    [
                        Reply(
                            tool_calls=(
                                call("edit_file", path="f.txt", old_string="a", new_string="ab"),
                            )
                        ),
                        Reply(tool_calls=(call("apply_patch", input=PATCH),)),
                        text("edited"),
                    ]
                )
            }
        )
    )
    program = tmp_path / "edit_program.py"
    program.write_text(PROGRAM)
    work = tmp_path / "work"
    work.mkdir()
    (work / "f.txt").write_text("a\n")
    # Killed after edit_file wrote f.txt, before its result was stored.
    expect_killed(
        popen_python(
            sd_home, program, "start", "edit f", str(work), SWARMDECK_CRASH_AT="tool.after:1"
        )
    )
    assert (work / "f.txt").read_text() == "ab\n"
    catalog = open_catalog()
    (session,) = catalog.list_sessions()
    (journaled,) = catalog.events(session.id, kinds=["edit"])
    assert not catalog.events(session.id, kinds=["tool_result"])
    if meddled:
        (work / "f.txt").write_text("ab\nsomeone else\n")
    code, out, err = finish(popen_python(sd_home, program, "recover", session.id, str(work)))
    assert code == 0, err
    assert out.strip() == "completed"
    results = [e.payload for e in catalog.events(session.id, kinds=["tool_result"])]
    first, patch = results
    if meddled:
        assert first["is_error"] and first["content"].startswith("interrupted:")
        assert (work / "f.txt").read_text() == "abc\nsomeone else\n"
    else:
        assert not first["is_error"] and first["content"] == journaled.payload["summary"]
        assert (work / "f.txt").read_text() == "abc\n"  # ab once, then the patch: never abb
    assert not patch["is_error"], patch["content"]
    assert len(catalog.events(session.id, kinds=["edit"])) == 2
