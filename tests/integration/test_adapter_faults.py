"""How both adapters meet servers that misbehave the way real ones do (llama.cpp, mock
servers, saturated vendors), through the real SDKs against the fake server's fault modes:
what is read, what is retried, what fails at once, and what the caller is told."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from swarmdeck.errors import ProviderError
from swarmdeck.models import errors, retry
from swarmdeck.models.estimate import estimate_tokens, prompt_tokens
from swarmdeck.models.factory import build_chat_model
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.types import ChatModel, Message, Notice, ToolCall
from swarmdeck.testing.fake_llm import FakeLLM

KINDS = ["openai", "anthropic", "openai-responses"]
TEXT = "four words of text"
CALL = {"name": "read_file", "arguments": {"path": "a.txt"}}


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "BACKOFF_BASE_S", 0.02)


@pytest.fixture
def fake(fake_llm: FakeLLM) -> FakeLLM:
    """The plugin's fake server, by a shorter name."""
    return fake_llm


def model_for(
    fake: FakeLLM, kind: str, limiter: ProviderLimiter | None = None, **fields: Any
) -> ChatModel:
    config = ProviderConfig(
        key=fields.pop("key", "local"),
        kind=kind,  # type: ignore[arg-type]
        base_url=fake.anthropic_base_url if kind == "anthropic" else fake.openai_base_url,
        model=fields.pop("model", "fake-model"),
        needs_key=False,
        **fields,
    )
    return build_chat_model(config, config.model, lambda: None, limiter or ProviderLimiter())


def chats(fake: FakeLLM) -> int:
    return sum(
        1 for r in fake.requests if r.path.endswith(("/completions", "/messages", "/responses"))
    )


def one_turn(fault: dict[str, Any] | None = None, **turn: Any) -> dict[str, Any]:
    spec = {"text": TEXT, "tool_calls": [CALL], **turn}
    if fault is not None:
        spec["fault"] = fault
    return {"scenarios": [{"turns": [spec]}]}


@pytest.mark.parametrize("kind", KINDS)
async def test_a_server_that_ignores_stream_is_read_not_retried(fake: FakeLLM, kind: str) -> None:
    fake.set_script(one_turn({"ignore_stream": True}, usage={"input": 11, "output": 7}))
    deltas: list[str] = []
    completion = await model_for(fake, kind).complete(
        [Message("user", "hi")], [], on_delta=deltas.append
    )
    assert chats(fake) == 1
    assert fake.requests[-1].body["stream"] is True  # asked for a stream, got a body
    assert completion.text == TEXT and deltas == [TEXT]
    assert [(c.name, c.arguments) for c in completion.tool_calls] == [
        ("read_file", '{"path": "a.txt"}')
    ]
    assert completion.stop_reason == "tool_calls"
    assert (completion.usage.input, completion.usage.output) == (11, 7)
    assert not completion.usage.estimated


@pytest.mark.parametrize("kind", KINDS)
async def test_an_empty_stream_near_the_window_fails_at_once(fake: FakeLLM, kind: str) -> None:
    fake.set_script(one_turn({"empty_stream": True}))
    prompt = [Message("user", "word " * 400)]  # ~500 tokens by the estimate
    assert prompt_tokens(prompt, []) >= 0.75 * 600
    with pytest.raises(ProviderError) as info:
        await model_for(fake, kind, context_tokens=600).complete(prompt, [])
    error = info.value
    assert chats(fake) == 1, "an empty answer to an oversized prompt must not be retried"
    assert error.kind == errors.CONTEXT_OVERFLOW and not error.retryable
    assert "over the model's context window" in error.message
    assert "not retried" in error.hint


@pytest.mark.parametrize("kind", KINDS)
async def test_an_empty_stream_far_from_the_window_is_retried(fake: FakeLLM, kind: str) -> None:
    fake.set_script(one_turn({"empty_stream": True, "times": 1}))
    completion = await model_for(fake, kind, context_tokens=100_000).complete(
        [Message("user", "hi")], []
    )
    assert completion.text == TEXT and chats(fake) == 2


@pytest.mark.parametrize("kind", KINDS)
async def test_a_context_length_rejection_is_named_and_not_retried(
    fake: FakeLLM, kind: str
) -> None:
    body = {"error": {"message": "This model's maximum context length is 8192 tokens"}}
    fake.set_script(one_turn({"status": 400, "body": body}))
    with pytest.raises(ProviderError) as info:
        await model_for(fake, kind).complete([Message("user", "hi")], [])
    assert info.value.kind == errors.CONTEXT_OVERFLOW and chats(fake) == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_without_usage_is_estimated(fake: FakeLLM, kind: str) -> None:
    fake.set_script(one_turn({"omit_usage": True}))
    history = [Message("user", "please read a.txt and summarise it")]
    priced = "claude-3-5-haiku-latest" if kind == "anthropic" else "gpt-4o-mini"
    key = kind  # a provider named after its kind is priced as its vendor's
    completion = await model_for(fake, kind, key=key, model=priced).complete(history, [])
    usage = completion.usage
    assert usage.estimated
    assert usage.input == prompt_tokens(history, [])
    assert usage.output == estimate_tokens(TEXT + "read_file" + '{"path": "a.txt"}')
    # Priced like reported usage, so cost budgets count it too.
    assert completion.cost_usd is not None and completion.cost_usd > 0


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_cut_after_the_200_says_so(fake: FakeLLM, kind: str) -> None:
    fake.set_script(one_turn({"cut_stream": True}, text="many words " * 50))
    with pytest.raises(ProviderError) as info:
        await model_for(fake, kind, max_attempts=2).complete([Message("user", "hi")], [])
    error = info.value
    assert error.kind == errors.STREAM_CUT
    assert "cannot reach" not in error.message and "endpoint up" not in error.hint
    assert "answered, then its streamed answer was cut off" in error.message
    assert "gave up after 2 attempts" in error.message
    # The retries are over: the hint says what to do, not what is being done.
    assert "retrying" not in error.hint and "concurrency 1" in error.hint


@pytest.mark.parametrize("kind", KINDS)
async def test_every_retry_is_told_with_its_reason_and_wait(fake: FakeLLM, kind: str) -> None:
    fake.set_script(one_turn({"status": 503, "times": 2}))
    notices: list[Notice] = []
    completion = await model_for(fake, kind, max_attempts=5).complete(
        [Message("user", "hi")], [], on_notice=notices.append
    )
    assert completion.text == TEXT
    assert [(n.what, n.attempt, n.max_attempts) for n in notices] == [
        ("retry", 1, 5),
        ("retry", 2, 5),
    ]
    assert all("temporary failure (503)" in n.reason and n.wait_s > 0 for n in notices)
    assert notices[0].one_line().startswith("retrying in ")
    assert "(attempt 2 of 5)" in notices[0].one_line()


async def test_a_cooldown_is_told_to_the_caller_that_set_it_and_to_those_it_holds(
    fake: FakeLLM,
) -> None:
    limiter = ProviderLimiter()

    def script(req: Any) -> Any:
        from swarmdeck.testing.script import Fault, Reply

        if "first" in req.task and len(req.messages) == 1 and not getattr(script, "hit", False):
            script.hit = True  # type: ignore[attr-defined]
            return Reply(text="x", fault=Fault(status=429, retry_after=1.5))
        return Reply(text="done")

    fake.set_script(script)
    first_told: list[Notice] = []
    second_told: list[Notice] = []
    first = model_for(fake, "openai", limiter)
    second = model_for(fake, "openai", limiter)
    started = time.monotonic()  # before the cooldown starts
    task = asyncio.ensure_future(
        first.complete([Message("user", "first")], [], on_notice=first_told.append)
    )
    while not first_told:
        await asyncio.sleep(0.01)
    told_at: list[float] = []

    def tell_second(notice: Notice) -> None:
        second_told.append(notice)
        told_at.append(time.monotonic())

    await second.complete([Message("user", "second")], [], on_notice=tell_second)
    await task
    assert [(n.what, n.wait_s) for n in first_told] == [("cooldown", 1.5)]
    assert "rate limited (429)" in first_told[0].reason
    assert [n.what for n in second_told] == ["held"]
    # Held for what is left of the 1.5 s: at least what had not passed when it was told (a
    # fixed 0.5 s floor failed on a loaded machine, where more than a second can pass).
    assert 1.5 - (told_at[0] - started) - 0.05 <= second_told[0].wait_s <= 1.5
    assert "cooling down" in second_told[0].one_line()


@pytest.mark.parametrize("kind", KINDS)
async def test_every_chunk_is_activity_even_without_text(fake: FakeLLM, kind: str) -> None:
    # A model writing a big file streams tool arguments only: that is the answer coming.
    fake.set_script({"scenarios": [{"turns": [{"tool_calls": [CALL]}]}]})
    chunks: list[None] = []
    texts: list[str] = []
    completion = await model_for(fake, kind).complete(
        [Message("user", "hi")], [], on_delta=texts.append, on_chunk=lambda: chunks.append(None)
    )
    assert completion.tool_calls == [
        ToolCall(completion.tool_calls[0].id, "read_file", '{"path": "a.txt"}')
    ]
    assert texts == [] and len(chunks) >= 4


async def test_a_failing_listener_does_not_fail_the_call(fake: FakeLLM) -> None:
    fake.set_script(one_turn({"status": 503, "times": 1}))

    def broken(_notice: Notice) -> None:
        raise RuntimeError("listener bug")

    completion = await model_for(fake, "openai").complete(
        [Message("user", "hi")], [], on_notice=broken, on_chunk=lambda: 1 / 0
    )
    assert completion.text == TEXT


@pytest.mark.parametrize(
    ("fault", "advice"),
    [
        ({"status": 503}, "try again later"),
        ({"status": 429}, "lower concurrency or rpm"),
        ({"cut_stream": True}, "concurrency 1"),
    ],
)
async def test_giving_up_says_what_to_do_not_that_it_retries(
    fake: FakeLLM, fault: dict[str, Any], advice: str
) -> None:
    fake.set_script(one_turn(fault, text="many words " * 30))
    with pytest.raises(ProviderError) as info:
        await model_for(fake, "openai", max_attempts=2, retry_after_cap_s=0).complete(
            [Message("user", "hi")], []
        )
    assert "gave up after 2 attempts" in info.value.message
    assert "retrying" not in info.value.one_line().split("gave up")[1]
    assert advice in info.value.hint


@pytest.mark.parametrize("kind", KINDS)
async def test_a_server_that_hangs_up_on_the_request_is_not_called_unreachable(
    fake: FakeLLM, kind: str
) -> None:
    # aimock's truncateAfterChunks: the server took the request, then closed the connection
    # before a byte of its answer left. It was reached: the answer was cut.
    fake.set_script(one_turn({"hang_up": True}))
    with pytest.raises(ProviderError) as info:
        await model_for(fake, kind, max_attempts=2).complete([Message("user", "hi")], [])
    error = info.value
    assert chats(fake) == 2
    assert error.kind == errors.STREAM_CUT and error.retryable
    assert "cannot reach" not in error.message and "endpoint up" not in error.hint
    assert "closed the connection before its answer was complete" in error.message
    assert "concurrency 1" in error.hint


@pytest.mark.parametrize("kind", KINDS)
async def test_an_endpoint_that_never_answers_fails_at_the_first_byte_timeout(
    fake: FakeLLM, kind: str
) -> None:
    fake.set_script(one_turn(delay=120))
    model = model_for(fake, kind, first_byte_timeout_s=0.5, max_attempts=2)
    started = asyncio.get_running_loop().time()
    with pytest.raises(ProviderError) as info:
        await model.complete([Message("user", "hi")], [])
    elapsed = asyncio.get_running_loop().time() - started
    error = info.value
    assert chats(fake) == 2 and elapsed < 10
    assert error.kind == errors.TIMED_OUT
    assert "sent no byte of an answer within 0.5s" in error.message
    assert "first_byte_timeout_s" in error.hint


def test_the_first_byte_timeout_has_a_default_below_the_read_timeout() -> None:
    config = ProviderConfig(key="p", kind="openai", base_url="http://127.0.0.1:1/v1", model="m")
    assert config.first_byte_timeout_s == 120 < config.timeout_s


@pytest.mark.parametrize("kind", KINDS)
async def test_an_empty_stream_near_a_window_only_the_server_knows_fails_at_once(
    kind: str,
) -> None:
    # llama.cpp with a 600-token window; the provider file sets no context_tokens.
    from swarmdeck.models import window

    window._known.clear()
    with FakeLLM(context_tokens=600, overflow="empty_stream") as fake:
        fake.set_script(one_turn())
        model = model_for(fake, kind)
        assert "context_tokens" not in model.config.model_fields_set  # type: ignore[attr-defined]
        prompt = [Message("user", "word " * 400)]  # ~500 tokens by the estimate
        for _ in range(2):
            with pytest.raises(ProviderError) as info:
                await model.complete(prompt, [])
            assert info.value.kind == errors.CONTEXT_OVERFLOW and not info.value.retryable
            assert "for a window of 600" in info.value.message
        assert chats(fake) == 2, "an empty answer near the server's window is not retried"
        # Asked once for the provider, where llama.cpp says it.
        assert [r.path for r in fake.requests if r.path == "/props"] == ["/props"]


@pytest.mark.parametrize("probe", ["llama_cpp_window", "vllm_window", "ollama_window"])
async def test_each_server_is_asked_for_its_window_where_it_says_it(probe: str) -> None:
    import httpx2

    from swarmdeck.models import window

    with FakeLLM(context_tokens=4096) as fake:
        async with httpx2.AsyncClient() as http:
            said = await getattr(window, probe)(http, fake.openai_base_url, {}, "fake-model")
    assert said == 4096


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [503, 502, 408])
async def test_retry_after_is_honoured_on_any_status_that_carries_it(
    fake: FakeLLM, kind: str, status: int
) -> None:
    fake.set_script(one_turn({"status": status, "retry_after": 1, "times": 1}))
    notices: list[Notice] = []
    completion = await model_for(fake, kind).complete(
        [Message("user", "hi")], [], on_notice=notices.append
    )
    assert completion.text == TEXT
    assert [(n.what, n.wait_s) for n in notices] == [("cooldown", 1.0)]
