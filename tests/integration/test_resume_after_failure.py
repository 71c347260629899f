"""A session that failed on a provider error is continued once the endpoint is back:
`sessions resume` and `dispatch --mode resume` ask the model again, as a new generation,
instead of replaying the stored error; the error stays in the transcript. Real CLI
processes, on both stores, against an endpoint that is really down (nothing listens on its
port) and then really up (the fake server on that port)."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    open_catalog,
    text,
)

CODE = RESULT_EXAMPLES["code"][0]


def free_port() -> int:
    """A loopback port nothing listens on (the endpoint is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kinds(sid: str) -> list[str]:
    return [e.kind for e in open_catalog().events(sid)]


def test_sessions_resume_asks_the_model_again_after_an_outage(
    store: Store, sd_home: Path, workdir: Path
) -> None:
    port = free_port()
    write_provider(sd_home, "local", f"http://127.0.0.1:{port}/v1", max_attempts=2)

    def wait_then_go_down(_req: FakeRequest) -> Reply:
        # The endpoint goes down while the session waits, and stays down past the retries.
        threading.Timer(0.3, before.stop).start()
        return calls(call("wait", seconds=1))

    before = FakeLLM(Scripted({"summarise": Agent([wait_then_go_down])}), port=port).start()
    down = run_cli(sd_home, "run", "summarise the project", "-m", "local", "-C", str(workdir))
    assert down.code == 3, down.stderr
    catalog = open_catalog()
    [session] = catalog.list_sessions()
    assert session.status == "failed" and "cannot reach" in (session.error or "")

    script = Scripted({"summarise": Agent([calls(call("wait", seconds=1)), text("back up")])})
    with FakeLLM(script, port=port):
        res = run_cli(sd_home, "sessions", "resume", session.id)
        assert res.code == 0, res.stderr
        assert res.stdout.strip() == "back up"
        # The transcript it prints holds the outage once, as history, then the new turn.
        assert res.stderr.count("error cannot reach") == 1
        assert res.stderr.rstrip().endswith(f"session {session.id}: completed")
        assert "WARNING" not in res.stderr
        # Asked again: the stored error is history, not the turn's answer.
        assert dict(script.asked_turns) == {("summarise", 1): 1}

        again = run_cli(sd_home, "sessions", "resume", session.id)  # ended: nothing to do
        assert again.code == 0 and again.stdout.strip() == "back up", again.stderr
        assert sum(script.asked_turns.values()) == 1

    final = catalog.get_session(session.id)
    assert (final.status, final.error, final.generation) == ("completed", None, 1)
    assert [k for k in kinds(session.id) if k != "notice"] == [
        "task",
        "assistant",
        "tool_result",
        "error",  # generation 0: the outage, kept in the transcript
        "status",
        "assistant",  # generation 1: turn 1 asked again
        "status",
    ]
    error = catalog.events(session.id, kinds=["error"])[0]
    assert error.key == "turn:1:error:g0" and error.payload["kind"] == "unreachable"


def test_dispatch_resume_asks_the_model_again_after_a_provider_failure(
    store: Store, sd_home: Path, workdir: Path
) -> None:
    port = free_port()
    write_provider(sd_home, "local", f"http://127.0.0.1:{port}/v1", max_attempts=1)
    args = ["dispatch", "--provider", "local", "--workdir", str(workdir)]
    failed = run_cli(sd_home, *args, "--mode", "code", "--task", "add NOTES.md", timeout=120)
    assert failed.code == 3, failed.stderr
    verdict = json.loads(failed.stdout.splitlines()[1])
    assert (verdict["verdict"], verdict["reason"]) == ("error", "provider_error")
    sid = verdict["session_id"]

    write = call("write_file", path="NOTES.md", content="notes\n")
    done = call("submit_result", result={**CODE, "files_changed": ["NOTES.md"]})
    script = Scripted({"add NOTES.md": Agent([calls(write), calls(done)])})
    with FakeLLM(script, port=port) as fake:
        resumed = run_cli(
            sd_home, *args, "--mode", "resume", "--session", sid, "--task", "go on", timeout=120
        )
        assert resumed.code == 0, resumed.stderr
        final = json.loads(resumed.stdout.splitlines()[1])
        assert final["verdict"] == "completed" and final["steps"] == 2
        assert (workdir / "NOTES.md").read_text() == "notes\n"
        # The first request of the resumed run is turn 0 again, with the new instruction.
        first = fake.requests[0].body["messages"]
        assert [m["role"] for m in first[1:]] == ["user", "user"]
        assert first[-1]["content"] == "go on"
    assert dict(script.asked_turns) == {("add NOTES.md", 0): 1, ("add NOTES.md", 1): 1}
