"""Pytest fixtures for driving real SDK clients against the fake LLM server.

Registered as the `swarmdeck` pytest plugin (the `pytest11` entry point), so a project
with swarmdeck installed gets `fake_llm` without a `pytest_plugins` line.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swarmdeck.testing.fake_llm import FakeLLM


@pytest.fixture
def fake_llm(request: pytest.FixtureRequest) -> Iterator[FakeLLM]:
    """A started FakeLLM on a free loopback port with an empty script; stopped afterwards.
    Its front end is "threads" unless parametrized indirectly (`indirect=["fake_llm"]`)."""
    with FakeLLM(frontend=getattr(request, "param", "threads")) as server:
        yield server
