"""Pytest fixtures for driving real SDK clients against the fake LLM server.

Registered as the `swarmdeck` pytest plugin (the `pytest11` entry point), so a project
with swarmdeck installed gets `fake_llm` without a `pytest_plugins` line.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swarmdeck.testing.fake_llm import FakeLLM


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A started FakeLLM on a free loopback port with an empty script; stopped afterwards."""
    with FakeLLM() as server:
        yield server
