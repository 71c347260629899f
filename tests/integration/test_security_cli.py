"""Issue 10 through the CLI: the sandbox is named in `started`, the verdict and `status`,
with a warning when it is none; a short-form `run` only reads unless told; an encoded key
never reaches the transcript, run.log or events.jsonl; under bwrap, Landlock and none."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.secrets.store import CredentialStore
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from tests.conftest import CliResult, run_cli, write_provider
from tests.integration.sandboxes import ENV_VALUE, sandbox_kind

__all__ = ["sandbox_kind"]

KEY = "sk-cli10-" + "Mx4t" * 9
ENCODED = {
    "base64": base64.b64encode(KEY.encode()).decode(),
    "hex": KEY.encode().hex(),
    "reversed": KEY[::-1],
}


def _model(request: FakeRequest) -> Reply:
    """Turn 0: the task's tool call; then the mode's result (or a plain answer)."""
    task = request.task
    if request.turn == 0 and "WRITE" in task:
        return Reply(tool_calls=(ReplyToolCall("write_file", {"path": "new.txt", "content": "x"}),))
    if request.turn == 0 and "ENCODE" in task:
        calls = tuple(
            ReplyToolCall("shell", {"argv": ["printf", "%s\\n", form]}) for form in ENCODED.values()
        )
        return Reply(text=f"echoing {ENCODED['base64']}", tool_calls=calls)
    if request.turn == 0 and "SHELL" in task:
        return Reply(tool_calls=(ReplyToolCall("shell", {"argv": ["pwd"]}),))
    mode = "code" if "CODE" in task else "explore"
    if "SHORT" in task:
        return Reply(text="done")
    result = RESULT_EXAMPLES[mode][0]
    return Reply(text="done", tool_calls=(ReplyToolCall("submit_result", {"result": result}),))


@pytest.fixture
def fake(sd_home: Path) -> Iterator[FakeLLM]:
    with FakeLLM(_model) as server:
        write_provider(sd_home, "fake", server.openai_base_url)
        yield server


def _dispatch(home: Path, workdir: Path, kind: str, mode: str, task: str, *extra: str) -> CliResult:
    args = ["dispatch", "--provider", "fake", "--mode", mode, "--workdir", str(workdir)]
    return run_cli(
        home, *args, "--task", task, *extra, timeout=120, SWARMDECK_SANDBOX=ENV_VALUE[kind]
    )


def _lines(res: CliResult) -> list[dict[str, Any]]:
    return [json.loads(line) for line in res.stdout.splitlines()]


def _offered(fake: FakeLLM) -> set[str]:
    body = fake.requests[0].body
    return {t["function"]["name"] for t in body.get("tools", [])}


def test_started_verdict_and_status_name_the_sandbox(
    sandbox_kind: str, sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    res = _dispatch(sd_home, workdir, sandbox_kind, "explore", "what is in here?")
    assert res.code == 0, res.stderr
    started, verdict = _lines(res)
    assert started["sandbox"] == verdict["sandbox"] == sandbox_kind
    warned = [line for line in res.stderr.splitlines() if "warning: no sandbox" in line]
    assert len(warned) == (1 if sandbox_kind == "none" else 0), res.stderr
    assert ("shell" in _offered(fake)) is (sandbox_kind != "none")
    saved = json.loads(Path(started["log_path"]).with_name("verdict.json").read_text())
    assert saved["sandbox"] == sandbox_kind
    status = run_cli(sd_home, "status", "--json", SWARMDECK_SANDBOX=ENV_VALUE[sandbox_kind])
    assert json.loads(status.stdout)["sandbox"]["kind"] == sandbox_kind
    human = run_cli(sd_home, "status", SWARMDECK_SANDBOX=ENV_VALUE[sandbox_kind])
    assert f"sandbox {sandbox_kind}" in human.stdout


def test_code_mode_shell_needs_a_sandbox_or_the_opt_out(
    sandbox_kind: str, sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    res = _dispatch(sd_home, workdir, sandbox_kind, "code", "CODE SHELL: where am I?")
    events = Path(_lines(res)[0]["events_path"]).read_text()
    if sandbox_kind == "none":
        assert "needs a sandbox" in events and "apt install bubblewrap" in events
        opted = _dispatch(
            sd_home, workdir, sandbox_kind, "code", "CODE SHELL: where am I?", "--no-sandbox"
        )
        started = _lines(opted)[0]
        assert started["sandbox"] == "none"
        assert "exit_code: 0" in Path(started["events_path"]).read_text()
        assert "as you asked" in opted.stderr
    else:
        assert "exit_code: 0" in events
    refused = _dispatch(sd_home, workdir, sandbox_kind, "explore", "x", "--no-sandbox")
    assert refused.code == 2 and "--no-sandbox does not apply to explore mode" in refused.stderr


def test_the_home_setting_opts_out_like_the_flag(
    sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    (sd_home / "settings.yaml").write_text("sandbox: off\n")
    res = _dispatch(sd_home, workdir, "none", "code", "CODE SHELL: where am I?")
    started = _lines(res)[0]
    assert (
        started["sandbox"] == "none" and "exit_code: 0" in Path(started["events_path"]).read_text()
    )
    (sd_home / "settings.yaml").write_text("sandbox: maybe\n")
    bad = run_cli(sd_home, "status")
    assert bad.code == 2 and "use `sandbox: auto` or `sandbox: off`" in bad.stderr


def test_an_encoded_key_never_reaches_a_sink(
    sandbox_kind: str, sd_home: Path, workdir: Path, fake: FakeLLM
) -> None:
    CredentialStore(sd_home / "credentials").set("openai", KEY)
    extra = ("--no-sandbox",) if sandbox_kind == "none" else ()
    res = _dispatch(sd_home, workdir, sandbox_kind, "code", "CODE ENCODE it", *extra)
    assert res.code == 0, res.stderr
    started = _lines(res)[0]
    assert "[REDACTED]" in Path(started["events_path"]).read_text()
    for path in sd_home.rglob("*"):
        if path.is_file() and path.name != "openai.key":
            data = path.read_bytes()
            for name, form in ENCODED.items():
                assert form.encode() not in data, f"{name} form of the key in {path}"
    # Nor was it sent back to the model in a tool result.
    sent = json.dumps([r.body for r in fake.requests])
    assert not any(form in sent for form in ENCODED.values())


@pytest.mark.parametrize("given", [None, "code"])
def test_a_short_form_run_only_reads_unless_told(
    sandbox_kind: str, sd_home: Path, workdir: Path, fake: FakeLLM, given: str | None
) -> None:
    args = ["run", "SHORT WRITE please", "-m", "fake", "-C", str(workdir)]
    res = run_cli(
        sd_home, *args, *(["--mode", given] if given else []),
        SWARMDECK_SANDBOX=ENV_VALUE[sandbox_kind],
    )  # fmt: skip
    assert res.code == 0, res.stderr
    if given is None:
        assert "read-only run with explore's tools" in res.stderr
        assert not (workdir / "new.txt").exists()
        offered = _offered(fake)
        assert {"read_file", "grep"} <= offered and "write_file" not in offered
        assert ("shell" in offered) is (sandbox_kind != "none")
    else:
        assert (workdir / "new.txt").read_text() == "x"
