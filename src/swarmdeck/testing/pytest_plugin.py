"""Pytest fixtures for driving real SDK clients against the fake LLM server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swarmdeck.testing.fake_llm import FakeLLM


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A started FakeLLM on a free loopback port with an empty script; stopped afterwards."""
    with FakeLLM() as server:
        yield server
