"""A runner's run exports its spans as the built-in loop's does (issue 33): the session's
invoke_agent, a chat span per response with the usage the runner reported, a tool span
per tool call."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import Script
from tests.conftest import run_cli, write_provider
from tests.runners.conftest import block_text

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
from tests.integrations.test_traces_otlp import collector  # noqa: F401 (the fixture)


def test_an_opencode_run_exports_its_spans(
    sd_home: Path,
    workdir: Path,
    with_runner: Callable[[str], Path],
    collector,  # noqa: F811
) -> None:
    with_runner("opencode")
    endpoint, spans = collector
    ls = {"name": "bash", "arguments": {"command": "ls", "description": "list"}}
    turns = [
        {"text": "Looking.", "tool_calls": [ls], "usage": {"input": 200, "output": 9}},
        {"text": block_text(RESULT_EXAMPLES["explore"][0]), "usage": {"input": 300, "output": 40}},
    ]
    with FakeLLM(Script.from_dict({"scenarios": [{"turns": turns}]})) as fake:
        write_provider(sd_home, "oc", fake.openai_base_url, runner="opencode", model="m1")
        done = run_cli(
            sd_home, "dispatch", "-p", "oc", "--mode", "explore", "-C", str(workdir),
            "--task", "Where is main?", "-q", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            timeout=180,
        )  # fmt: skip
    assert done.code == 0, done.stderr
    verdict = json.loads(done.stdout.splitlines()[1])
    names = sorted(s["name"] for s in spans)
    assert names == ["chat m1", "chat m1", "execute_tool bash", "invoke_agent"]
    chats = [s["attributes"] for s in spans if s["name"] == "chat m1"]
    assert sum(c["gen_ai.usage.output_tokens"] for c in chats) == verdict["tokens"]["output"]
    assert all(c["gen_ai.conversation.id"] == verdict["session_id"] for c in chats)
