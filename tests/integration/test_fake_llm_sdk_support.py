"""Helpers of the fake LLM's SDK tests (test_fake_llm_sdk_answers.py,
test_fake_llm_faults.py, test_fake_llm_server.py, test_fake_llm_window_cache.py): real
openai and anthropic SDK clients on the fake server, closed after each test; one-call
requests and one-turn scripts; and the server on each of its front ends.

Holds no tests itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import openai
import pytest

from swarmdeck.testing.fake_llm import FakeLLM

TOOLS_OPENAI: list[Any] = [
    {
        "type": "function",
        "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}},
    }
]
TOOLS_ANTHROPIC: list[Any] = [
    {"name": "read_file", "input_schema": {"type": "object", "properties": {}}}
]


_open_clients: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []
FRONTENDS = ["threads", "asyncio"]


# Named in the decorator, so the tests' `fake_llm` parameters do not shadow the name their
# module imports (ruff F811).
@pytest.fixture(params=FRONTENDS, name="fake_llm")
def fake_llm_on_each_front_end(request: pytest.FixtureRequest) -> Iterator[FakeLLM]:
    """The fake server on each of its front ends: they must answer alike."""
    with FakeLLM(frontend=request.param) as server:
        yield server


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    """Close the SDK clients a test made, so no connection outlives its event loop."""
    # Left by a test that ran its own loop (asyncio.run): that loop, and the clients'
    # sockets with it, is gone, and closing them on this one raises "Event loop is closed".
    _open_clients.clear()
    yield
    while _open_clients:
        await _open_clients.pop().close()


def one_turn(**turn: Any) -> dict[str, Any]:
    """A script with a single scenario of a single turn."""
    return {"scenarios": [{"turns": [turn]}]}


def oai(fake: FakeLLM, retries: int = 0) -> openai.AsyncOpenAI:
    """A real OpenAI client on the fake server."""
    client = openai.AsyncOpenAI(
        base_url=fake.openai_base_url,
        api_key="x",
        max_retries=retries,
        # Plain HTTP on loopback: skipping the CA bundle makes each client ~10x cheaper.
        http_client=openai.DefaultAsyncHttpxClient(verify=False),
    )
    _open_clients.append(client)
    return client


def ant(fake: FakeLLM, retries: int = 0) -> anthropic.AsyncAnthropic:
    """A real Anthropic client on the fake server."""
    client = anthropic.AsyncAnthropic(
        base_url=fake.anthropic_base_url,
        api_key="x",
        max_retries=retries,
        http_client=anthropic.DefaultAsyncHttpxClient(verify=False),
    )
    _open_clients.append(client)
    return client


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def ask_openai(fake: FakeLLM, text: str = "task", **kwargs: Any) -> Any:
    """One plain Chat Completions call."""
    messages = kwargs.pop("messages", [user(text)])
    return await oai(fake).chat.completions.create(model="m", messages=messages, **kwargs)


async def ask_anthropic(fake: FakeLLM, text: str = "task", **kwargs: Any) -> Any:
    """One plain Messages call."""
    messages = kwargs.pop("messages", [user(text)])
    return await ant(fake).messages.create(model="m", max_tokens=100, messages=messages, **kwargs)
