"""A worker that cannot see a session's workdir (another host, no shared filesystem) refuses
the session, naming the host and the path, instead of running it somewhere else (issue 36,
item 3)."""

from __future__ import annotations

import shutil
from pathlib import Path

from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import Reply
from tests.conftest import write_provider
from tests.integration.test_sessions_support import finish, open_catalog, popen_cli


def test_a_session_whose_workdir_this_host_cannot_see_is_refused(
    sd_home: Path, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(lambda _r: Reply(text="ran"))
    elsewhere = tmp_path / "on-another-host"
    elsewhere.mkdir()
    sid = Host().create_session(SessionRequest("look", "fake", elsewhere)).id
    shutil.rmtree(elsewhere)  # as a worker on a host without that path sees it
    code, _out, err = finish(popen_cli(sd_home, "sessions", "resume", sid, SWARMDECK_HOSTNAME="b"))
    assert code == 3, err
    record = open_catalog().get_session(sid)
    assert record.status == "failed"
    assert "host b cannot see the session's workdir" in record.error
    assert str(elsewhere) in record.error
    assert not fake_llm.requests  # nothing ran
