"""Classify provider failures: which are worth retrying, and what the user should do about the rest."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from swarmdeck.errors import ProviderError

# GLM answers these with HTTP 429 although waiting does not help: the balance or plan quota is gone.
GLM_QUOTA_CODES = frozenset({"1113", "1304", "1308", "1310"})
# OpenAI and Moonshot report an exhausted account as a 429 with one of these codes or types.
QUOTA_CODES = frozenset(
    {"insufficient_quota", "exceeded_current_quota_error", "billing_hard_limit"}
)
# Anthropic streams errors as events with a type and no HTTP status of their own.
ANTHROPIC_TYPE_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
VENDOR_MESSAGE_MAX = 300
# A prompt estimated at this share of the model's window or more is "near the window".
NEAR_WINDOW = 0.75
# Vendors say a prompt is over the window in a 400 with one of these (OpenAI's code, the
# phrases of vLLM, llama.cpp, Anthropic and DeepSeek).
CONTEXT_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "exceeds the available context size",
    "prompt is too long",
    "too many tokens",
)

# Named kinds of provider failure (ProviderError.kind), for callers that react to one in
# particular (compaction on CONTEXT_OVERFLOW, say). Hints are what the user can do once
# the retries are over: while they last, the retry notices say what happens.
UNREACHABLE = "unreachable"  # nothing accepted the connection
TIMED_OUT = "timed_out"  # no answer within the provider's timeout
STREAM_CUT = "stream_cut"  # the server answered 200, then the answer ended early
RATE_LIMITED = "rate_limited"
TEMPORARY = "temporary"  # 5xx, 408, 409: may pass
NO_STATUS = "no_status"  # an error without an HTTP status (streamed after a 200)
CONTEXT_OVERFLOW = "context_overflow"  # the prompt is over the model's context window
QUOTA = "quota"  # balance or plan quota used up
REJECTED = "rejected"  # a fatal status: bad key, bad request, not found...
INCOMPATIBLE = "incompatible"  # an answer we cannot read


def classify(
    status: int | None,
    body: Mapping[str, Any] | str | None,
    headers: Mapping[str, str] | None = None,
    *,
    provider: str = "provider",
) -> ProviderError:
    """The ProviderError for an HTTP failure: retryable or fatal, with a one-line what-to-do."""
    fields = _error_fields(body)
    if status is None or status < 400:
        # Errors streamed after a 200 carry their meaning only in the body.
        status = ANTHROPIC_TYPE_STATUS.get(fields.type, status)
    vendor = _one_line(fields.message)
    said = f": {vendor}" if vendor else ""
    retry_after = parse_retry_after(headers)
    if status is None:
        return ProviderError(
            f"{provider} failed without an HTTP status{said}",
            "check the endpoint and its logs; the error came inside the answer",
            retryable=True,
            kind=NO_STATUS,
        )
    if status == 429 and _is_quota(fields):
        return ProviderError(
            f"{provider}: quota exhausted ({status}){said}",
            "top up or wait for the plan's quota to reset; not retried",
            retryable=False,
            status=status,
            kind=QUOTA,
        )
    if status in (400, 413) and _is_context_overflow(fields):
        return context_overflow(provider, f"the provider said so ({status}){said}")
    return _by_status(status, said, retry_after, provider)


def _by_status(status: int, said: str, retry_after: float | None, provider: str) -> ProviderError:
    """The error for a status code whose body said nothing more specific."""
    fatal = {
        400: (
            f"{provider} rejected the request (400){said}",
            "the request is invalid; not retried",
        ),
        401: (f"{provider}: bad key (401){said}", f"run `swarmdeck key set {provider}`"),
        402: (f"{provider}: no balance (402){said}", "top up the account with the vendor"),
        403: (
            f"{provider}: bad key or no access (403){said}",
            f"run `swarmdeck key set {provider}`",
        ),
        404: (
            f"{provider}: model or endpoint not found (404){said}",
            "check the model name and base_url: `swarmdeck provider ls`",
        ),
        413: (f"{provider}: request too large (413){said}", "shorten the conversation"),
    }
    if status in fatal:
        message, hint = fatal[status]
        return ProviderError(message, hint, retryable=False, status=status, kind=REJECTED)
    if status == 429:
        return ProviderError(
            f"{provider}: rate limited (429){said}",
            "the provider kept rate limiting; try again later, or lower concurrency or rpm "
            "in its provider file",
            retryable=True,
            status=status,
            retry_after=retry_after,
            kind=RATE_LIMITED,
        )
    if status in (408, 409) or status >= 500:
        return ProviderError(
            f"{provider}: temporary failure ({status}){said}",
            "the provider kept failing; try again later",
            retryable=True,
            status=status,
            retry_after=retry_after,
            kind=TEMPORARY,
        )
    return ProviderError(
        f"{provider}: request failed ({status}){said}",
        "not retried; check the request and the provider settings",
        retryable=False,
        status=status,
        kind=REJECTED,
    )


def _is_quota(fields: _Fields) -> bool:
    """A 429 that waiting cannot fix: the balance or the plan's quota is used up."""
    return (
        fields.code in GLM_QUOTA_CODES or fields.code in QUOTA_CODES or fields.type in QUOTA_CODES
    )


def _is_context_overflow(fields: _Fields) -> bool:
    """A rejection that says the prompt does not fit the model's window."""
    said = f"{fields.code} {fields.type} {fields.message}".lower()
    return any(marker in said for marker in CONTEXT_MARKERS)


def unreachable(provider: str, base_url: str, detail: str) -> ProviderError:
    """The endpoint did not answer (refused, DNS, TLS): retryable, but say where we tried."""
    return ProviderError(
        f"cannot reach {base_url}: {_one_line(detail) or 'connection failed'}",
        f"is the {provider} endpoint up? check base_url with `swarmdeck provider ls`",
        retryable=True,
        kind=UNREACHABLE,
    )


def never_connected(exc: BaseException) -> bool:
    """True when a timeout came before any connection was made."""
    import httpx2

    return isinstance(exc.__cause__ or exc.__context__, httpx2.ConnectTimeout)


def hung_up(exc: BaseException) -> bool:
    """True when the server took the connection and the request, then closed it before
    its answer began: aiohttp's ServerDisconnectedError, httpx's RemoteProtocolError
    (the aiohttp transport reports the first as a connect timeout, so look down the
    chain)."""
    import httpx2

    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "ServerDisconnectedError" or isinstance(
            seen, httpx2.RemoteProtocolError
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def closed_early(provider: str, detail: str) -> ProviderError:
    """The server took the request, then closed the connection before its answer was
    whole (none of it may have arrived): reached, but cut off, as a cut stream."""
    cut = stream_cut(provider, detail)
    return ProviderError(
        f"{provider}: the server took the request, then closed the connection before its "
        f"answer was complete: {_one_line(detail) or 'disconnected'}",
        cut.hint,
        retryable=True,
        kind=STREAM_CUT,
    )


def timed_out(provider: str, base_url: str, timeout_s: float) -> ProviderError:
    """No answer within the provider's timeout."""
    return ProviderError(
        f"{provider}: no answer from {base_url} within {timeout_s:g}s",
        "raise timeout_s in the provider file if the model is slow",
        retryable=True,
        kind=TIMED_OUT,
    )


def no_first_byte(provider: str, base_url: str, timeout_s: float) -> ProviderError:
    """The endpoint took the request and sent nothing back within the first-byte timeout."""
    return ProviderError(
        f"{provider}: {base_url} took the request and sent no byte of an answer within "
        f"{timeout_s:g}s",
        "is the server stuck? raise first_byte_timeout_s in the provider file if the model "
        "is slow to start answering",
        retryable=True,
        kind=TIMED_OUT,
    )


def stream_cut(provider: str, detail: str = "") -> ProviderError:
    """The server answered 200, then its answer ended before the vendor said it was complete."""
    suffix = f": {_one_line(detail)}" if detail else ""
    return ProviderError(
        f"{provider}: the server answered, then its streamed answer was cut off{suffix}",
        "the connection dropped mid-answer: check the server's log (a single-slot server "
        "such as llama.cpp cuts concurrent streams: set concurrency 1 in its provider file)",
        retryable=True,
        kind=STREAM_CUT,
    )


def context_overflow(provider: str, why: str) -> ProviderError:
    """The prompt is (probably) over the model's context window: retrying sends it again."""
    return ProviderError(
        f"{provider}: the prompt is probably over the model's context window: {why}",
        "not retried; shorten the task or the conversation, or use a model with a larger "
        "window (context_tokens in the provider file says what swarmdeck assumes)",
        retryable=False,
        kind=CONTEXT_OVERFLOW,
    )


def empty_answer(provider: str, prompt_tokens: int, context_tokens: int) -> ProviderError:
    """A 200 whose stream held nothing at all. Servers (llama.cpp) answer a prompt over
    their window so: near the window that is what it means, and a retry sends the same
    prompt again. Elsewhere it is a stream cut short."""
    if prompt_tokens >= NEAR_WINDOW * context_tokens:
        return context_overflow(
            provider,
            f"the server sent an empty answer to a prompt of about {prompt_tokens} tokens "
            f"(estimated) for a window of {context_tokens}",
        )
    return stream_cut(provider, "the answer was empty")


def incompatible(provider: str, detail: str) -> ProviderError:
    """An answer the adapter cannot read: an incompatible endpoint or a bug."""
    return ProviderError(
        f"{provider}: {_one_line(detail)}",
        "an incompatible endpoint or a bug; not retried",
        retryable=False,
        kind=INCOMPATIBLE,
    )


def still_paused(provider: str, continuations: int) -> ProviderError:
    """The server paused the model's turn (its own tool loop ran long) again and again."""
    return ProviderError(
        f"{provider}: the model's turn was still paused after {continuations} continuations",
        "the server's own tools (its tool search) kept the turn going; not retried: run "
        "the session again, or set `tool_search: off` in the provider file",
        retryable=False,
        kind=INCOMPATIBLE,
    )


def parse_retry_after(
    headers: Mapping[str, str] | None, now: Callable[[], float] = time.time
) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - now())


@dataclass(frozen=True)
class _Fields:
    """What vendors put in an error body: a message, a code and a type."""

    message: str = ""
    code: str = ""
    type: str = ""


def _error_fields(body: Mapping[str, Any] | str | None) -> _Fields:
    """Message, code and type from OpenAI-, Anthropic- and GLM-shaped bodies (or raw text)."""
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return _Fields(message=body)
    if not isinstance(body, Mapping):
        return _Fields()
    # SDKs hand us either the whole body or just its `error` object.
    inner = body.get("error", body)
    if isinstance(inner, str):
        return _Fields(message=inner, code=_text(body.get("code")), type=_text(body.get("type")))
    if not isinstance(inner, Mapping):
        return _Fields()
    return _Fields(
        message=_text(inner.get("message") or body.get("message")),
        code=_text(inner.get("code") if inner.get("code") is not None else body.get("code")),
        type=_text(inner.get("type")),
    )


def _text(value: Any) -> str:
    """A scalar as text; None as the empty string."""
    return "" if value is None else str(value)


def _one_line(text: str) -> str:
    """Collapse whitespace, cap the length, and pass through the shared redactor."""
    flat = " ".join(text.split())
    if len(flat) > VENDOR_MESSAGE_MAX:
        flat = flat[: VENDOR_MESSAGE_MAX - 1] + "…"
    return redact(flat)


def redact(text: str) -> str:
    """The project's redaction filter when it is installed; identity otherwise."""
    try:
        from swarmdeck.secrets.redact import default_redactor
    except ImportError:
        return text
    try:
        redactor: Any = default_redactor()
        if hasattr(redactor, "redact"):
            return str(redactor.redact(text))
        return str(redactor(text))
    except Exception:
        # Fail closed: a broken redactor must not let vendor text through unfiltered.
        return "(details withheld: the redaction filter failed)"
