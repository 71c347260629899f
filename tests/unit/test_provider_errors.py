"""Error classification: what is retried, what is fatal, and what the user is told to do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from swarmdeck.models.errors import classify, parse_retry_after, stream_cut, timed_out, unreachable


def _openai_body(
    message: str, code: str | None = None, type_: str = "invalid_request_error"
) -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529])
def test_transient_statuses_are_retryable(status: int) -> None:
    error = classify(status, _openai_body("busy"), {}, provider="kimi")
    assert error.retryable
    assert error.status == status


@pytest.mark.parametrize(
    ("status", "words", "hint"),
    [
        (400, "rejected the request", "not retried"),
        (401, "bad key", "swarmdeck key set glm"),
        (403, "bad key", "swarmdeck key set glm"),
        (402, "no balance", "top up"),
        (404, "not found", "swarmdeck provider ls"),
        (413, "too large", "shorten"),
        (422, "request failed", "not retried"),
    ],
)
def test_fatal_statuses_say_what_to_do(status: int, words: str, hint: str) -> None:
    error = classify(status, _openai_body("vendor says no"), {}, provider="glm")
    assert not error.retryable
    assert words in error.message
    assert hint in error.hint
    assert "vendor says no" in error.message
    assert "\n" not in error.one_line()


def test_bad_request_carries_the_vendor_message() -> None:
    body = _openai_body("messages[2]: reasoning_content is missing")
    error = classify(400, body, {}, provider="deepseek")
    assert "reasoning_content is missing" in error.message


@pytest.mark.parametrize("code", ["1113", "1304", "1308", "1310", 1113])
def test_glm_quota_codes_on_429_are_fatal(code: str | int) -> None:
    body = {"error": {"code": code, "message": "余额不足或无可用资源包,请充值。"}}
    error = classify(429, body, {"Retry-After": "3"}, provider="glm")
    assert not error.retryable
    assert "quota exhausted" in error.message


def test_glm_rate_limit_code_on_429_is_retryable() -> None:
    body = {"error": {"code": "1302", "message": "并发数过高"}}
    assert classify(429, body, {}, provider="glm").retryable


def test_openai_insufficient_quota_is_fatal_but_plain_429_is_not() -> None:
    quota = classify(429, _openai_body("You exceeded your current quota", "insufficient_quota"), {})
    assert not quota.retryable
    limited = classify(
        429, _openai_body("Rate limit reached", "rate_limit_exceeded"), {"retry-after": "7"}
    )
    assert limited.retryable
    assert limited.retry_after == 7.0


def test_sdk_unwrapped_error_object_is_understood() -> None:
    # The openai SDK hands over the inner `error` object, not the whole body.
    inner = {
        "message": "You exceeded your current quota",
        "type": "insufficient_quota",
        "code": "insufficient_quota",
    }
    assert not classify(429, inner, {}).retryable


def test_anthropic_streamed_error_event_is_classified_by_type() -> None:
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert classify(200, overloaded, {}).retryable
    invalid = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}
    assert not classify(None, invalid, None).retryable


def test_text_and_missing_bodies() -> None:
    assert "upstream exploded" in classify(502, "upstream exploded", {}).message
    assert classify(None, None, None).retryable
    assert not classify(401, None, None).retryable


def test_long_or_multiline_vendor_messages_stay_one_line() -> None:
    error = classify(400, _openai_body("line one\nline two\t" + "x" * 1000), {})
    assert "\n" not in error.message
    assert len(error.message) < 400


def test_retry_after_seconds_ms_and_http_date() -> None:
    assert parse_retry_after({"Retry-After": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    when = datetime(2030, 1, 1, tzinfo=UTC)
    now = (when - timedelta(seconds=30)).timestamp()
    assert parse_retry_after(
        {"Retry-After": format_datetime(when, usegmt=True)}, now=lambda: now
    ) == pytest.approx(30)
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-3"}) == 0.0
    assert parse_retry_after(None) is None


def test_transport_failures_are_retryable_and_say_where() -> None:
    down = unreachable("vllm", "http://127.0.0.1:8000/v1", "All connection attempts failed")
    assert down.retryable
    assert down.message.startswith(
        "cannot reach http://127.0.0.1:8000/v1: All connection attempts failed"
    )
    assert "swarmdeck provider ls" in down.hint
    assert timed_out("kimi", "https://api.moonshot.ai/v1", 600).retryable
    assert stream_cut("kimi", "peer closed").retryable


def test_vendor_text_passes_through_the_redactor() -> None:
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 2
    error = classify(
        401, _openai_body(f"Incorrect API key provided: {key}."), {}, provider="openai"
    )
    assert key not in error.one_line()
    assert "Incorrect API key provided" in error.message
