"""The `fake_llm` fixture as an installed pytest plugin: a project's tests get it with no
`pytest_plugins` line, and this suite loads it exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import swarmdeck.testing.pytest_plugin as plugin

USER_TEST = """
import openai


def test_my_agent_talks_to_the_fake(fake_llm):
    fake_llm.set_script({"scenarios": [{"turns": [{"text": "hello from the fake"}]}]})
    client = openai.OpenAI(base_url=fake_llm.openai_base_url, api_key="unused")
    reply = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "hello from the fake"
"""


def test_a_project_gets_the_fixture_without_a_pytest_plugins_line(tmp_path: Path) -> None:
    project = tmp_path / "myproject"
    project.mkdir()
    (project / "test_agent.py").write_text(USER_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SWARMDECK_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_agent.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


def test_the_plugin_is_registered_once(request: pytest.FixtureRequest) -> None:
    names = [name for name, p in request.config.pluginmanager.list_name_plugin() if p is plugin]
    assert names == ["swarmdeck"]
