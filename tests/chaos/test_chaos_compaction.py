"""SIGKILL right after a compaction's summary is journaled: the session resumes from it and
no second summary is asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing.fake_llm import FakeLLM
from tests.conftest import write_provider
from tests.integration.context_support import TASK, CronReader, data_file_text
from tests.integration.test_context_window import is_summary_request_body
from tests.integration.test_sessions_support import expect_killed, finish, open_catalog, popen_cli

pytestmark = pytest.mark.chaos


@pytest.mark.parametrize("point", ["compact.after", "compact.before"])
def test_a_kill_during_compaction_asks_no_second_summary(
    sd_home: Path, workdir: Path, fake_llm: FakeLLM, point: str
) -> None:
    write_provider(
        sd_home, "fake", fake_llm.openai_base_url, context_tokens=6000, output_tokens=1000
    )
    fake_llm.context_tokens = 6000
    (workdir / "data.txt").write_text(data_file_text())
    model = CronReader(12)
    fake_llm.set_script(model)
    sid = (
        Host().create_session(SessionRequest(TASK, "fake", workdir, options={"max_turns": 100})).id
    )
    expect_killed(popen_cli(sd_home, "sessions", "resume", sid, SWARMDECK_CRASH_AT=point))
    catalog = open_catalog()
    asked = sum(1 for r in fake_llm.requests if is_summary_request_body(r))
    stored = catalog.events(sid, kinds=["compaction"])
    # Killed after the summary was stored, or before it was asked for.
    assert (asked, len(stored)) == ((1, 1) if point == "compact.after" else (0, 0))
    code, _, err = finish(popen_cli(sd_home, "sessions", "resume", sid))
    assert code == 0, err
    compactions = catalog.events(sid, kinds=["compaction"])
    assert catalog.get_session(sid).status == "completed" and model.ticks == 12
    assert sum(1 for r in fake_llm.requests if is_summary_request_body(r)) == len(compactions)
    assert len({c.key for c in compactions}) == len(compactions) >= 2
