"""SIGKILL between a budget's warning and its note to the model: the resumed session warns
once, notes once, marks the session, and still ends at its budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing.fake_llm import FakeLLM
from tests.conftest import write_provider
from tests.integration.test_budget_warnings import SCRIPT
from tests.integration.test_sessions_support import expect_killed, finish, open_catalog, popen_cli

pytestmark = pytest.mark.chaos


def test_a_kill_between_warning_and_note_warns_once(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(SCRIPT)
    options = {"budget": {"max_tokens": 2500}, "max_turns": 10}
    sid = Host().create_session(SessionRequest("SPEND it", "fake", workdir, options=options)).id
    crashed = popen_cli(sd_home, "sessions", "resume", sid, SWARMDECK_CRASH_AT="budget.warned")
    expect_killed(crashed)
    catalog = open_catalog()
    assert len(catalog.events(sid, kinds=["budget_warning"])) == 1
    assert not catalog.events(sid, kinds=["budget_note"])
    code, _, err = finish(popen_cli(sd_home, "sessions", "resume", sid))
    assert code == 3, err
    assert catalog.get_session(sid).status == "budget_exceeded"
    assert len(catalog.events(sid, kinds=["budget_warning"])) == 1
    assert len(catalog.events(sid, kinds=["budget_note"])) == 1
    assert catalog.get_session(sid).options["budget_warning"] == "max_tokens 80%"
    noted = [r for r in fake_llm.requests if "[budget]" in str((r.body or {}).get("messages"))]
    assert len(noted) == 1 and len(fake_llm.requests) == 3
