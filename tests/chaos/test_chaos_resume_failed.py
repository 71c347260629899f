"""SIGKILL during the generation that `sessions resume` starts for a session that failed on
a provider error: the restart takes over that generation, and no stored turn is asked for
again (only a turn cut off before it was stored may be)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    TurnLedger,
    call,
    calls,
    expect_killed,
    open_catalog,
    popen_cli,
)

pytestmark = pytest.mark.chaos


# After the retried turn 0 was stored; and with turn 1 asked but not stored.
@pytest.mark.parametrize("crash_at", ["tool.before:1", "llm.after:2"])
def test_a_crash_in_the_retried_generation_repeats_no_stored_turn(
    store: Store, sd_home: Path, workdir: Path, fake_llm, crash_at: str
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url, max_attempts=1)
    script = Scripted(
        {
            "look": Agent(
                [calls(call("list_dir", path=".")), calls(call("read_file", path="app.py"))]
            )
        }
    )
    script.agents["look"].rest = "it returns 42"

    def outage(req):  # the provider is down for the first request
        from swarmdeck.testing.script import Fault, Reply

        if not fake_llm.requests[1:]:
            return Reply(text="x", fault=Fault(status=503))
        return script(req)

    fake_llm.set_script(outage)
    down = run_cli(sd_home, "run", "look at app.py", "-m", "fake", "-C", str(workdir))
    assert down.code == 3, down.stderr
    catalog = open_catalog()
    [session] = catalog.list_sessions()
    assert session.status == "failed"

    ledger = TurnLedger(script, catalog, fake_llm)
    crashed = popen_cli(sd_home, "sessions", "resume", session.id, SWARMDECK_CRASH_AT=crash_at)
    expect_killed(crashed)
    ledger.killed()
    res = run_cli(sd_home, "sessions", "resume", session.id, timeout=90)
    assert res.code == 0, res.stderr
    assert res.stdout.strip() == "it returns 42"
    ledger.check()
    record = catalog.get_session(session.id)
    assert (record.status, record.generation) == ("completed", 1)
    assert [e.key for e in catalog.events(session.id, kinds=["error"])] == ["turn:0:error:g0"]
