"""The hooks the runtime calls at its seams, and their two implementations: NO_TRACING (every
hook a shared no-op context) and OtelTracing (spans in the GenAI semantic conventions).

Every string that reaches a span passes the redactor; message contents are recorded only
when opted in; an error's message is redacted and its traceback never recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from swarmdeck.integrations.telemetry.metrics import record_token_usage, token_usage_histogram

# Attribute names of the GenAI semantic conventions (checked against
# opentelemetry-semantic-conventions 0.66b2, gen_ai_attributes).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
CONVERSATION = "gen_ai.conversation.id"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
# swarmdeck's own.
EFFECT = "swarmdeck.tool.effect"
GENERATION = "swarmdeck.session.generation"
MODE = "swarmdeck.session.mode"
PARENT = "swarmdeck.session.parent_id"
TURN = "swarmdeck.turn"
# Why the runtime asked the model: a turn of the conversation, or a compaction's summary.
PURPOSE = "swarmdeck.chat.purpose"
UNCACHED_INPUT_TOKENS = "swarmdeck.usage.uncached_input_tokens"
COST = "swarmdeck.cost_usd"
ESTIMATED = "swarmdeck.usage.estimated"
# The option a child session carries: its parent's span context at the spawn (W3C).
TRACEPARENT_OPTION = "traceparent"
CONTENT_MAX = 16_000


@dataclass(frozen=True)
class SessionInfo:
    """What the invoke_agent span of a session generation says."""

    session_id: str
    generation: int
    agent: str | None
    provider: str
    model: str
    mode: str
    parent_id: str | None
    traceparent: str | None


@dataclass(frozen=True)
class TurnInfo:
    """What a chat span says before the call."""

    session_id: str
    turn: int
    provider: str
    model: str
    purpose: str = "turn"


@dataclass(frozen=True)
class ToolInfo:
    """What an execute_tool span says before the call."""

    session_id: str
    name: str
    call_id: str
    effect: str
    arguments: str


class TurnRecorder:
    """Receives a turn's outcome (a no-op here)."""

    def completed(self, completion: Any, messages: list[Any]) -> None:
        """The model answered."""

    def failed(self, kind: str, message: str) -> None:
        """The call failed."""


class ToolRecorder:
    """Receives a tool call's outcome (a no-op here)."""

    def finished(self, content: str, is_error: bool) -> None:
        """The tool answered."""


_NULL_TURN = nullcontext(TurnRecorder())
_NULL_TOOL = nullcontext(ToolRecorder())
_NULL = nullcontext()


class Tracing:
    """No tracing: every hook returns a shared no-op context."""

    enabled = False

    def session(self, info: SessionInfo) -> Any:
        """Around one generation of a session."""
        return _NULL

    def turn(self, info: TurnInfo) -> Any:
        """Around one model call; yields a TurnRecorder."""
        return _NULL_TURN

    def tool(self, info: ToolInfo) -> Any:
        """Around one tool call; yields a ToolRecorder."""
        return _NULL_TOOL

    def traceparent(self) -> str | None:
        """The current span's context as a W3C traceparent (for a child session)."""
        return None

    def flush(self) -> None:
        """Export what is pending (the process is about to end)."""


NO_TRACING = Tracing()


class OtelTracing(Tracing):
    """Spans through an OpenTelemetry TracerProvider."""

    enabled = True

    def __init__(
        self,
        provider: Any,
        redact: Callable[[str], str],
        capture_content: bool = False,
        meter_provider: Any = None,
    ) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind

        self._trace = trace
        # The span kinds, imported once: the SDK is an extra, imported only when tracing.
        self.kinds = SpanKind
        self.provider = provider
        self.tracer = provider.get_tracer("swarmdeck")
        self.redact = redact
        self.capture_content = capture_content
        self.meter_provider = meter_provider
        self.token_usage = token_usage_histogram(meter_provider)

    def _text(self, value: str) -> str:
        text = self.redact(value)
        return text if len(text) <= CONTENT_MAX else text[:CONTENT_MAX] + "…"

    def _attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Attributes without Nones, every string through the redactor."""
        out: dict[str, Any] = {}
        for key, value in attrs.items():
            if value is None:
                continue
            if isinstance(value, str):
                value = self._text(value)
            elif isinstance(value, list | tuple):
                value = [self._text(v) if isinstance(v, str) else v for v in value]
            out[key] = value
        return out

    def _fail(self, span: Any, kind: str, message: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute(ERROR_TYPE, kind)
        span.set_status(Status(StatusCode.ERROR, self._text(message)[:500]))

    @contextmanager
    def session(self, info: SessionInfo) -> Iterator[None]:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        parent = None
        if info.traceparent:
            parent = TraceContextTextMapPropagator().extract({"traceparent": info.traceparent})
        name = f"invoke_agent {info.agent}" if info.agent else "invoke_agent"
        attrs = {
            OPERATION: "invoke_agent",
            AGENT_NAME: info.agent or "swarmdeck",
            AGENT_ID: info.session_id,
            CONVERSATION: info.session_id,
            PROVIDER: info.provider,
            REQUEST_MODEL: info.model,
            MODE: info.mode,
            GENERATION: info.generation,
            PARENT: info.parent_id,
        }
        with self._span(name, self.kinds.INTERNAL, attrs, parent):
            yield

    @contextmanager
    def turn(self, info: TurnInfo) -> Iterator[TurnRecorder]:
        attrs = {
            OPERATION: "chat",
            PROVIDER: info.provider,
            REQUEST_MODEL: info.model,
            CONVERSATION: info.session_id,
            TURN: info.turn,
            PURPOSE: info.purpose,
        }
        with self._span(f"chat {info.model}", self.kinds.CLIENT, attrs) as span:
            yield _OtelTurn(self, span, info)

    @contextmanager
    def tool(self, info: ToolInfo) -> Iterator[ToolRecorder]:
        attrs = {
            OPERATION: "execute_tool",
            TOOL_NAME: info.name,
            TOOL_CALL_ID: info.call_id,
            TOOL_TYPE: "function",
            EFFECT: info.effect,
            CONVERSATION: info.session_id,
            TOOL_ARGUMENTS: info.arguments if self.capture_content else None,
        }
        with self._span(f"execute_tool {info.name}", self.kinds.INTERNAL, attrs) as span:
            yield _OtelTool(self, span)

    @contextmanager
    def _span(
        self, name: str, kind: Any, attrs: dict[str, Any], parent: Any = None
    ) -> Iterator[Any]:
        """A current span with redacted attributes; an exception that passes through marks
        it failed by its type alone (no message, no traceback: they may hold secrets)."""
        with self.tracer.start_as_current_span(
            name,
            context=parent,
            kind=kind,
            attributes=self._attrs(attrs),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                self._fail(span, type(exc).__name__, type(exc).__name__)
                raise

    def traceparent(self) -> str | None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        return carrier.get("traceparent")

    def flush(self) -> None:
        for provider in (self.provider, self.meter_provider):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flush(5_000)


class _OtelTurn(TurnRecorder):
    def __init__(self, tracing: OtelTracing, span: Any, info: TurnInfo) -> None:
        self.tracing = tracing
        self.span = span
        self.info = info

    def completed(self, completion: Any, messages: list[Any]) -> None:
        usage = completion.usage
        if self.tracing.token_usage is not None:
            record_token_usage(self.tracing.token_usage, self.info, usage)
        attrs: dict[str, Any] = {
            RESPONSE_MODEL: completion.model or None,
            FINISH_REASONS: [completion.stop_reason],
            # The conventions count every input token, cached or not, in input_tokens (the
            # cache attributes say how many of them the cache served or took); swarmdeck's
            # own `input` is the part no cache served.
            INPUT_TOKENS: usage.input + usage.cache_read + usage.cache_write,
            UNCACHED_INPUT_TOKENS: usage.input,
            OUTPUT_TOKENS: usage.output,
            CACHE_READ_TOKENS: usage.cache_read,
            CACHE_WRITE_TOKENS: usage.cache_write,
            REASONING_TOKENS: usage.reasoning,
            ESTIMATED: usage.estimated,
            COST: completion.cost_usd,
        }
        if self.tracing.capture_content:
            attrs[INPUT_MESSAGES] = json.dumps([_message(m) for m in messages], ensure_ascii=False)
            output = {
                "role": "assistant",
                "parts": [{"type": "text", "content": completion.text}]
                + [
                    {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
                    for c in completion.tool_calls
                ],
                "finish_reason": completion.stop_reason,
            }
            attrs[OUTPUT_MESSAGES] = json.dumps([output], ensure_ascii=False)
        self.span.set_attributes(self.tracing._attrs(attrs))

    def failed(self, kind: str, message: str) -> None:
        self.tracing._fail(self.span, kind, message)


def _message(message: Any) -> dict[str, Any]:
    """A runtime Message in the conventions' shape (role and parts)."""
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        )
    elif message.content:
        parts.append({"type": "text", "content": message.content})
    parts += [
        {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}
        for c in message.tool_calls
    ]
    return {"role": message.role, "parts": parts}


class _OtelTool(ToolRecorder):
    def __init__(self, tracing: OtelTracing, span: Any) -> None:
        self.tracing = tracing
        self.span = span

    def finished(self, content: str, is_error: bool) -> None:
        if self.tracing.capture_content:
            self.span.set_attribute(TOOL_RESULT, self.tracing._text(content))
        if is_error:
            first = content.split("\n", 1)[0]
            self.tracing._fail(self.span, "tool_error", first)
