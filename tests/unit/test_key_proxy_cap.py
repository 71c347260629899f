"""The key proxy holds a runner to the session's max_turns: the request past the cap is
refused there and never reaches the provider, whatever the runner's output said so far."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import ClientSession

from swarmdeck.runners.key_proxy import KeyProxy
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.reply import Fault
from swarmdeck.testing.script import Reply

TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


def _body(tools: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
    if tools:
        body["tools"] = TOOLS
    return body


async def _ask(proxy: KeyProxy, *, tools: bool) -> int:
    """The status of one request through the proxy (its answer read to the end)."""
    async with (
        ClientSession() as client,
        client.post(
            f"{proxy.base_url}/chat/completions",
            json=_body(tools),
            headers={"Authorization": f"Bearer {proxy.token}"},
        ) as reply,
    ):
        await reply.read()
        return reply.status


async def _run_capped(fake: FakeLLM) -> tuple[list[int], KeyProxy]:
    proxy = KeyProxy(fake.openai_base_url, "openai", lambda: "sk-test", turns_left=2)
    await proxy.start()
    try:
        codes = [await _ask(proxy, tools=t) for t in (True, False, True, True)]
    finally:
        await proxy.close()
    return codes, proxy


def test_the_turn_past_the_cap_is_refused_and_never_sent(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(lambda req: Reply(text="ok"))
    codes, proxy = asyncio.run(_run_capped(fake_llm))
    # Two turns pass, a side request without tools is no turn, the third turn is refused.
    assert codes == [200, 200, 200, 400]
    assert proxy.capped and proxy.turns_left == 0
    sent = [r for r in fake_llm.requests if r.path.endswith("/chat/completions")]
    assert [bool((r.body or {}).get("tools")) for r in sent] == [True, False, True]


def test_a_failed_turn_does_not_count(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(lambda req: Reply(fault=Fault(status=429, times=1)))
    proxy = KeyProxy(fake_llm.openai_base_url, "openai", lambda: "sk-test", turns_left=1)

    async def go() -> list[int]:
        await proxy.start()
        try:
            return [await _ask(proxy, tools=True) for _ in range(3)]
        finally:
            await proxy.close()

    # The refused (429) request is retried and answered; only then is the cap reached.
    assert asyncio.run(go()) == [429, 200, 400]
    assert proxy.capped
