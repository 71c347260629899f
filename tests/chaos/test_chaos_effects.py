"""SIGKILL at named points of LLM and tool steps, in an SDK program with tools of each
effect class; every restart takes over with `Swarm.recover()` in a fresh process.

A `read` and an `idempotent` tool cut off by a crash run again (the idempotent one with
the same key); a `once` tool is never run again: the model is told it was interrupted.
An LLM turn cut off before it was stored is asked again; nothing else is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    expect_killed,
    finish,
    open_catalog,
    popen_python,
    text,
    tool_results,
)

pytestmark = pytest.mark.chaos

PROGRAM = '''
"""An SDK program with one tool per effect class; each appends to a counter file."""
import asyncio
import sys
from pathlib import Path

from swarmdeck import Swarm, tool

counters = Path(sys.argv[3])


def bump(name: str, line: str) -> None:
    with open(counters / name, "a") as f:
        f.write(line + "\\n")


@tool(effect="read")
def probe() -> str:
    """Look at the world."""
    bump("probe", "ran")
    return "the world is fine"


@tool(effect="idempotent")
def put(key: str, value: str, ctx=None) -> str:
    """Store a value under a key."""
    bump("put", f"{key}={value} {ctx.call_key}")
    return f"stored {key}"


@tool(effect="once")
def fire(what: str) -> str:
    """Launch something (must not happen twice)."""
    bump("fire-" + what, "ran")
    return f"fired {what}"


async def main() -> None:
    command, arg = sys.argv[1], sys.argv[2]
    async with Swarm(tools=[probe, put, fire]) as swarm:
        if command == "start":
            session = await swarm.start(arg, "fake", workdir=counters)
        else:
            swarm.recover()
            session = swarm.session(arg)
        print((await session.result(timeout=60)).status)


asyncio.run(main())
'''


def _script() -> Scripted:
    def summary(req: FakeRequest) -> Reply:
        return text(" | ".join(r.split(":")[0] for r in tool_results(req)))  # "Error" when failed

    return Scripted(
        {
            "effects": Agent(
                [
                    calls(call("probe")),
                    calls(call("put", key="k", value="v")),
                    calls(call("fire", what="a")),
                    calls(call("fire", what="b")),
                    summary,
                ]
            )
        }
    )


# Each process dies at one point; the next one takes over from the previous.
CHAIN = [
    "llm.after:1",  # turn 0 answered, not stored: asked again
    "tool.after:1",  # probe (read) ran, result not stored: runs again
    "tool.after:2",  # probe's rerun, then put (idempotent) ran: runs again, same key
    "tool.before:2",  # put's rerun, then fire a (once) marked as starting, not run
    "tool.after:1",  # fire a: interrupted; fire b (once) ran, result not stored
    "llm.before:1",  # fire b: interrupted; killed before turn 4 is asked
]


def test_effect_classes_across_sigkills(
    store: Store, sd_home: Path, tmp_path: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = _script()
    fake_llm.set_script(script)
    program = tmp_path / "effects_program.py"
    program.write_text(PROGRAM)
    counters = tmp_path / "counters"
    counters.mkdir()

    expect_killed(
        popen_python(
            sd_home, program, "start", "effects", str(counters), SWARMDECK_CRASH_AT=CHAIN[0]
        )
    )
    catalog = open_catalog()
    (session,) = catalog.list_sessions()
    for point in CHAIN[1:]:
        expect_killed(
            popen_python(
                sd_home, program, "recover", session.id, str(counters), SWARMDECK_CRASH_AT=point
            )
        )
    code, out, err = finish(popen_python(sd_home, program, "recover", session.id, str(counters)))
    assert code == 0, err
    assert out.strip() == "completed"

    def ran(name: str) -> list[str]:
        path = counters / name
        return path.read_text().splitlines() if path.exists() else []

    assert ran("probe") == ["ran", "ran"]
    put_runs = ran("put")
    assert len(put_runs) == 2 and len(set(put_runs)) == 1, put_runs  # same key both times
    assert ran("fire-a") == []  # killed before it started: never run
    assert ran("fire-b") == ["ran"]  # ran once, never again
    # Turn 0 was asked twice (its answer was lost with the process); no other turn was.
    assert script.asked["effects"] == 6
    record = catalog.get_session(session.id)
    assert record.status == "completed"
    assert record.final_text == "the world is fine | stored k | Error | Error"
    fired = [
        e.payload
        for e in catalog.events(session.id, kinds=["tool_result"])
        if e.payload["name"] == "fire"
    ]
    assert [(r["is_error"], r["content"].split(":")[0]) for r in fired] == [
        (True, "interrupted"),
        (True, "interrupted"),
    ]
    keys = [e.key for e in catalog.events(session.id)]
    assert len(keys) == len(set(keys))
    assert [e.key for e in catalog.events(session.id, kinds=["assistant"])] == [
        f"turn:{n}" for n in range(5)
    ]
    assert catalog.usage_totals([session.id]).turns == 5
