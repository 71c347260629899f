"""The fake LLM server itself, driven by the real openai and anthropic SDK clients: its
model list, the requests it records, concurrent requests, a prompt stop with an answer in
flight, a script read from a file, `run_fake_llm` serving until SIGTERM; and HTTP/1.1
keep-alive: one connection serves all of a client's requests on either SDK transport,
until a cut stream costs it, and the asyncio front end serves many clients from one thread.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from swarmdeck.testing.fake_llm import FakeLLM
from tests.integration.test_fake_llm_sdk_support import (
    FRONTENDS,
    TOOLS_ANTHROPIC,
    TOOLS_OPENAI,
    _close_clients,  # noqa: F401  (autouse)
    _open_clients,
    ant,
    ask_openai,
    fake_llm_on_each_front_end,  # noqa: F401  (the `fake_llm` fixture)
    oai,
    one_turn,
    user,
)
from tests.machine_load import stretched_by_load

# --- server bookkeeping ----------------------------------------------------------------------


async def test_models_list_for_both_sdks(fake_llm: FakeLLM) -> None:
    assert [m.id async for m in oai(fake_llm).models.list()] == ["fake-model"]
    assert [m.id async for m in ant(fake_llm).models.list()] == ["fake-model"]


async def test_requests_are_recorded(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    before = time.monotonic()
    await ask_openai(fake_llm, "remember me")
    [recorded] = fake_llm.requests
    assert recorded.path == "/v1/chat/completions"
    assert recorded.method == "POST"
    assert recorded.headers["authorization"] == "Bearer x"
    assert recorded.body["messages"] == [user("remember me")]
    assert recorded.timestamp >= before
    fake_llm.reset_stats()
    assert fake_llm.requests == []


async def test_concurrent_requests_are_counted(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    fake_llm.latency = 0.3
    client = oai(fake_llm)
    await asyncio.gather(
        *(client.chat.completions.create(model="m", messages=[user(f"t{i}")]) for i in range(5))
    )
    # All five in flight at once is the proof they were served side by side; a bound on
    # the wall time (once 1 s, against 1.5 s in a row) only measured the machine's load.
    assert fake_llm.max_concurrent == 5
    # The client has its replies before the server's handlers have returned: let them end.
    deadline = time.monotonic() + 5
    while fake_llm.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    fake_llm.reset_stats()
    assert fake_llm.max_concurrent == 0


@pytest.mark.parametrize("frontend", FRONTENDS)
async def test_stop_is_prompt_even_with_a_slow_answer_in_flight(frontend: Any) -> None:
    fake = FakeLLM(one_turn(text="ok"), latency=10, frontend=frontend).start()
    pending = asyncio.create_task(ask_openai(fake))
    await asyncio.sleep(0.1)
    started = time.monotonic()
    await asyncio.to_thread(fake.stop)
    # Well before the 10 s answer, however loaded the machine.
    assert time.monotonic() - started < min(stretched_by_load(1.0), 5.0)
    with pytest.raises(openai.APIConnectionError):
        await pending


async def test_set_script_from_file_path(fake_llm: FakeLLM, tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text("scenarios:\n  - turns:\n      - text: from yaml\n")
    fake_llm.set_script(path)
    assert (await ask_openai(fake_llm)).choices[0].message.content == "from yaml"


def test_run_fake_llm_serves_until_sigterm(tmp_path: Path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text("scenarios:\n  - turns:\n      - text: from the cli\n")
    code = (
        "import sys; from pathlib import Path;"
        "from swarmdeck.testing.fake_llm import run_fake_llm;"
        "run_fake_llm(0, Path(sys.argv[1]))"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline().strip()
            assert line.startswith("fake LLM listening on http://127.0.0.1:")
            port = int(line.rsplit(":", 1)[1])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            body = json.dumps({"model": "m", "messages": [user("x")]})
            conn.request("POST", "/v1/chat/completions", body=body)
            answer = json.loads(conn.getresponse().read())
            conn.close()
            assert answer["choices"][0]["message"]["content"] == "from the cli"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=5) == 0
            assert proc.stdout is not None
            assert proc.stdout.read() == ""
            assert proc.stderr.read() == "fake LLM served 1 requests over 1 connections\n"
        finally:
            if proc.poll() is None:
                proc.kill()


# --- Keep-alive ---------------------------------------------------------------------------


def sdk_client(
    fake: FakeLLM, sdk: str, transport: str
) -> openai.AsyncOpenAI | anthropic.AsyncAnthropic:
    """One real SDK client on the fake server over the given HTTP transport (the aiohttp
    one is what swarmdeck's adapters use)."""
    module: Any = openai if sdk == "openai" else anthropic
    http_client = (
        module.DefaultAioHttpClient()
        if transport == "aiohttp"
        else module.DefaultAsyncHttpxClient(verify=False)
    )
    base_url = fake.openai_base_url if sdk == "openai" else fake.anthropic_base_url
    client = module.AsyncOpenAI if sdk == "openai" else module.AsyncAnthropic
    made = client(base_url=base_url, api_key="x", max_retries=0, http_client=http_client)
    _open_clients.append(made)
    return made


async def exchange(client: Any, sdk: str, stream: bool) -> None:
    """One chat request, read to its end (a streamed one event by event)."""
    if sdk == "openai":
        answer = await client.chat.completions.create(
            model="m", messages=[user("t")], stream=stream, tools=TOOLS_OPENAI
        )
    else:
        answer = await client.messages.create(
            model="m", max_tokens=100, messages=[user("t")], stream=stream, tools=TOOLS_ANTHROPIC
        )
    if stream:
        async for _ in answer:
            pass


@pytest.mark.parametrize("transport", ["httpx", "aiohttp"])
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
async def test_one_connection_serves_every_request_of_a_client(
    fake_llm: FakeLLM, sdk: str, transport: str
) -> None:
    """HTTP/1.1 keep-alive: streamed answers (chunked), JSON answers and errors
    (Content-Length) all leave the connection open for the next request."""
    client = sdk_client(fake_llm, sdk, transport)
    fake_llm.set_script(
        one_turn(text="reading", tool_calls=[{"name": "read_file", "arguments": {"p": "x"}}])
    )
    for i in range(12):
        await exchange(client, sdk, stream=i % 3 != 0)
    fake_llm.set_script(one_turn(text="x", fault={"status": 429, "retry_after": 0}))
    for _ in range(3):
        with pytest.raises(openai.RateLimitError if sdk == "openai" else anthropic.RateLimitError):
            await exchange(client, sdk, stream=True)
    await client.models.list()
    assert len(fake_llm.requests) == 16
    assert fake_llm.connections_opened == 1


async def test_a_cut_stream_costs_the_client_its_connection(fake_llm: FakeLLM) -> None:
    """The count sees the server hang up: after a cut stream the next request connects anew."""
    client = sdk_client(fake_llm, "openai", "aiohttp")
    fake_llm.set_script(one_turn(text="one two three four", fault={"cut_stream": True}))
    with pytest.raises(openai.APIConnectionError):
        await exchange(client, "openai", stream=True)
    fake_llm.set_script(one_turn(text="whole"))
    await exchange(client, "openai", stream=True)
    await exchange(client, "openai", stream=True)
    assert fake_llm.connections_opened == 2
    fake_llm.reset_stats()
    assert fake_llm.connections_opened == 0


async def test_the_asyncio_front_end_serves_many_clients_from_one_thread() -> None:
    """The point of it: concurrent connections cost no thread each, and keep-alive holds."""
    with FakeLLM(one_turn(text="ok"), latency=0.2, frontend="asyncio") as fake:
        client = sdk_client(fake, "openai", "aiohttp")

        def count() -> int:
            # The client resolves the host name in the loop's executor threads: not ours.
            return sum(not t.name.startswith("asyncio") for t in threading.enumerate())

        threads = count()
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, count())
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch())
        for _ in range(2):
            await asyncio.gather(*(exchange(client, "openai", stream=True) for _ in range(100)))
        watcher.cancel()
        assert fake.max_concurrent == 100
        assert peak == threads
        assert len(fake.requests) == 200
        assert fake.connections_opened == 100
