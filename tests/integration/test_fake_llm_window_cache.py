"""The fake LLM's context window and prompt caches, through the real SDKs."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
import pytest

from swarmdeck.models import errors
from swarmdeck.testing.fake_llm import FakeLLM
from tests.integration.test_fake_llm_sdk_support import (
    FRONTENDS,
    ant,
    ask_anthropic,
    ask_openai,
    oai,
    one_turn,
    user,
)

# Both front ends must answer alike.
pytestmark = pytest.mark.parametrize("fake_llm", FRONTENDS, indirect=True)

LONG = "word " * 2000  # 10,000 characters: 2,500 tokens at the fake's rate


def _classified(exc: openai.APIStatusError | anthropic.APIStatusError) -> str:
    """What swarmdeck's classifier makes of the error the SDK raised."""
    return errors.classify(exc.status_code, exc.body, exc.response.headers).kind


async def test_openai_over_the_window_is_context_length_exceeded(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="never"))
    fake_llm.context_tokens = 1000
    with pytest.raises(openai.BadRequestError) as caught:
        await ask_openai(fake_llm, LONG)
    assert caught.value.code == "context_length_exceeded"
    assert "maximum context length is 1000 tokens" in caught.value.message
    assert _classified(caught.value) == errors.CONTEXT_OVERFLOW
    # Room for the output counts: a prompt that fits alone is refused with max_tokens.
    fits = "x" * 3600
    assert (await ask_openai(fake_llm, fits)).choices[0].message.content == "never"
    with pytest.raises(openai.BadRequestError):
        await ask_openai(fake_llm, fits, max_tokens=200)


async def test_anthropic_over_the_window_is_prompt_too_long(fake_llm: FakeLLM) -> None:
    fake_llm.set_script({"context_tokens": 500, "scenarios": [{"turns": [{"text": "no"}]}]})
    with pytest.raises(anthropic.BadRequestError) as caught:
        await ask_anthropic(fake_llm, LONG)
    body: Any = caught.value.body
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("prompt is too long: 2600 tokens > 500 maximum")
    assert _classified(caught.value) == errors.CONTEXT_OVERFLOW


@pytest.mark.parametrize(
    ("style", "said"),
    [("vllm", "you requested"), ("llamacpp", "exceeds the available context size")],
)
async def test_local_servers_refuse_with_their_own_400(
    fake_llm: FakeLLM, style: str, said: str
) -> None:
    fake_llm.set_script(one_turn(text="no"))
    fake_llm.context_tokens, fake_llm.overflow = 1000, style  # type: ignore[assignment]
    with pytest.raises(openai.BadRequestError) as caught:
        await ask_openai(fake_llm, LONG)
    assert said in str(caught.value.body)
    assert _classified(caught.value) == errors.CONTEXT_OVERFLOW


async def test_empty_stream_overflow_is_a_200_with_nothing(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="no"))
    fake_llm.context_tokens, fake_llm.overflow = 1000, "empty_stream"
    stream = await oai(fake_llm).chat.completions.create(
        model="m", messages=[user(LONG)], stream=True
    )
    assert [chunk async for chunk in stream] == []


async def test_openai_reports_the_longest_prefix_seen_before(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    first = await ask_openai(fake_llm, messages=[{"role": "system", "content": LONG}, user("a")])
    assert first.usage.prompt_tokens == 2501
    assert first.usage.prompt_tokens_details is None
    messages = [{"role": "system", "content": LONG}, user("a"), user("b" * 400)]
    second = await ask_openai(fake_llm, messages=messages)
    assert second.usage.prompt_tokens == 2601
    assert second.usage.prompt_tokens_details.cached_tokens == 2501
    # A prompt that differs in its first message shares no prefix.
    other = await ask_openai(fake_llm, messages=[{"role": "system", "content": "x" + LONG}])
    assert other.usage.prompt_tokens_details is None


async def test_small_prefixes_are_not_cached(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    await ask_openai(fake_llm, "short")
    again = await ask_openai(fake_llm, messages=[user("short"), user("more")])
    assert again.usage.prompt_tokens_details is None


async def test_anthropic_caches_only_at_its_breakpoints(fake_llm: FakeLLM) -> None:
    fake_llm.set_script(one_turn(text="ok"))
    marked = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    plain = await ask_anthropic(fake_llm, "a", system=LONG)
    again = await ask_anthropic(fake_llm, "a", system=LONG)
    assert again.usage.cache_read_input_tokens == 0 == plain.usage.cache_creation_input_tokens
    first = await ask_anthropic(fake_llm, "a", system=marked)
    assert (first.usage.cache_creation_input_tokens, first.usage.cache_read_input_tokens) == (
        2500,
        0,
    )
    assert first.usage.input_tokens == 1
    second = await ant(fake_llm).messages.create(
        model="m",
        max_tokens=100,
        system=marked,
        messages=[
            user("a"),
            {"role": "assistant", "content": "ok"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}],
            },
        ],
    )
    # The system prefix is read; the rest up to the last breakpoint is written.
    assert second.usage.cache_read_input_tokens == 2500
    assert second.usage.cache_creation_input_tokens == 3
    assert second.usage.input_tokens == 0


async def test_a_prefix_is_cached_once_its_answer_begins(fake_llm: FakeLLM) -> None:
    """As on the vendors: requests sent while the first is still read each pay for the
    prefix; one sent after its answer began is served it."""
    fake_llm.set_script(one_turn(text="ok"))
    fake_llm.latency = 0.3
    messages = [{"role": "system", "content": LONG}, user("a")]
    at_once = await asyncio.gather(*(ask_openai(fake_llm, messages=messages) for _ in range(3)))
    assert [r.usage.prompt_tokens_details for r in at_once] == [None, None, None]
    after = await ask_openai(fake_llm, messages=[*messages, user("b")])
    assert after.usage.prompt_tokens_details.cached_tokens == 2501


async def test_openai_serves_the_blocks_a_differing_message_shares(fake_llm: FakeLLM) -> None:
    """Past the whole messages two prompts share, OpenAI serves what the first message
    that differs shares with the earlier one, in steps of 128 tokens."""
    fake_llm.set_script(one_turn(text="ok"))
    shared = "the same instructions " * 50  # 1,100 characters: two blocks of 512
    system = {"role": "system", "content": LONG}
    await ask_openai(fake_llm, messages=[system, user(shared + "task one")])
    sibling = await ask_openai(fake_llm, messages=[system, user(shared + "task two, longer")])
    assert sibling.usage.prompt_tokens_details.cached_tokens == 2500 + 2 * 128
