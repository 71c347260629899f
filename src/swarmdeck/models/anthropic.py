"""ChatModel over the Anthropic Messages API, streamed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2

from swarmdeck.errors import ProviderError
from swarmdeck.models import errors
from swarmdeck.models.edit_shapes import edit_shape, to_vendor
from swarmdeck.models.limiter import ProviderLimiter
from swarmdeck.models.registry import ProviderConfig
from swarmdeck.models.retry import (
    CallbackError,
    KeyLoader,
    SharedHttpClient,
    TurnCall,
    complete_with_retry,
    http_timeout,
    is_json_answer,
    load_key,
    pooled_client_factory,
    scrub,
)
from swarmdeck.models.types import (
    ChunkCallback,
    Completion,
    DeltaCallback,
    Message,
    NoticeCallback,
    ToolCall,
    ToolSpec,
    Usage,
)

# A prompt-cache breakpoint: the prefix up to the block that carries it is cached.
CACHE_POINT = {"type": "ephemeral"}
# Anthropic's stop reasons in the neutral (Chat Completions) vocabulary.
STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}


class AnthropicModel:
    """Streams a Messages turn and reassembles text, tool_use blocks, thinking and usage."""

    def __init__(
        self,
        config: ProviderConfig,
        model_name: str,
        key_loader: KeyLoader,
        limiter: ProviderLimiter,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        self.config = config
        self.model_name = model_name
        self._key_loader = key_loader
        self._limiter = limiter
        self._http = SharedHttpClient(http_client, pooled_client_factory(anthropic))

    async def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        on_delta: DeltaCallback | None = None,
        on_chunk: ChunkCallback | None = None,
        on_notice: NoticeCallback | None = None,
    ) -> Completion:
        """Send the conversation, return the model's turn. Raises ProviderError."""
        request = self.request_body(messages, tools)
        turn = TurnCall(messages, tools, on_delta, on_chunk, on_notice)
        return await complete_with_retry(
            self.config, self.model_name, self._limiter, lambda: self._attempt(request, turn), turn
        )

    async def aclose(self) -> None:
        """Close the adapter's own connection pool."""
        await self._http.aclose()

    def request_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The JSON body of the request: system apart, tool results as user blocks, and
        prompt-cache breakpoints on the tools, the system prompt and the last message (the
        prompt only grows at its end between compactions, so each turn reads the prefix
        the turn before wrote)."""
        body: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": self.config.output_tokens,
            "messages": to_anthropic_messages(messages),
            "stream": True,
        }
        system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
        if system:
            body["system"] = [{"type": "text", "text": system, "cache_control": dict(CACHE_POINT)}]
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
            body["tools"][-1]["cache_control"] = dict(CACHE_POINT)
        if body["messages"]:
            body["messages"][-1]["content"][-1]["cache_control"] = dict(CACHE_POINT)
        return to_vendor(edit_shape(self.config.kind, self.config.edit_tools), body)

    async def _attempt(self, request: dict[str, Any], turn: TurnCall) -> Completion:
        """One HTTP call; every failure leaves as a ProviderError without the SDK's traceback."""
        key = await load_key(self.config, self._key_loader)
        client: anthropic.AsyncAnthropic | None = anthropic.AsyncAnthropic(
            api_key=key,
            base_url=self.config.base_url,
            max_retries=0,
            timeout=http_timeout(self.config),
            http_client=self._http.get(),
        )
        failure: BaseException
        answered = False
        try:
            stream = await client.messages.create(**request)
            answered = True
            async with stream:
                if is_json_answer(stream.response):
                    # A server that ignores `stream: true` sent the whole message.
                    body = json.loads(await stream.response.aread())
                    return await _read_body(body, turn, self.config, self.model_name)
                return await _read_stream(stream, turn, self.config, self.model_name)
        except CallbackError as exc:
            failure = exc.original
        except Exception as exc:
            failure = self._translate(exc, answered)
        finally:
            # Tracebacks keep frames alive; this one must not keep the keyed client.
            client = None
        if isinstance(failure, ProviderError):
            failure = scrub(failure, key)
        key = ""
        # Raised here, outside the except block, so no SDK exception rides along as context.
        raise failure

    def _translate(self, exc: Exception, answered: bool) -> ProviderError:
        """An SDK or transport exception as a classified ProviderError; `answered` when the
        server had sent its 200 (a connection lost after it is a cut stream)."""
        config = self.config
        if isinstance(exc, ProviderError):
            return exc
        if isinstance(exc, anthropic.APIStatusError):
            # Errors streamed after a 200 arrive here too; classify reads their type.
            return errors.classify(
                exc.status_code, exc.body, exc.response.headers, provider=config.key
            )
        # A connection that never opened is no slow model (the aiohttp transport reports
        # a refused connection as a connect timeout): it is unreachable.
        if isinstance(exc, anthropic.APITimeoutError) and not errors.never_connected(exc):
            return errors.timed_out(config.key, config.base_url, config.timeout_s)
        if isinstance(exc, anthropic.APIConnectionError):
            cause = str(exc.__cause__ or exc.__context__ or exc)
            if answered:
                return errors.stream_cut(config.key, cause)
            return errors.unreachable(config.key, config.base_url, cause)
        if isinstance(exc, anthropic.APIError):
            return errors.classify(
                None, exc.body if exc.body is not None else exc.message, None, provider=config.key
            )
        if isinstance(exc, httpx2.TransportError | httpx2.StreamError):
            return errors.stream_cut(config.key, f"{type(exc).__name__}: {exc}")
        if isinstance(exc, ValueError) and answered:
            return errors.incompatible(config.key, f"the answer is not valid JSON: {exc}")
        return errors.incompatible(config.key, f"unexpected {type(exc).__name__}: {exc}")


def to_anthropic_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Neutral messages as Messages-API turns; consecutive user-side blocks share one message."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            # The API wants alternating turns: several tool results (and a user note after
            # them) travel together in one user message.
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    """The role and content blocks of one neutral message."""
    if message.role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id or "",
            "content": message.content,
        }
        if message.is_error:
            block["is_error"] = True
        return "user", [block]
    if message.role == "user":
        return "user", [{"type": "text", "text": message.content}] if message.content else []
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": message.content}] if message.content else []
    )
    blocks += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments)}
        for call in message.tool_calls
    ]
    return "assistant", blocks


def _tool_input(arguments: str) -> dict[str, Any]:
    """tool_use input must be an object; broken JSON from an earlier turn becomes {}."""
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@dataclass
class _Block:
    """One content block being streamed."""

    type: str
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)


@dataclass
class _Assembly:
    """Everything the event stream has said so far."""

    blocks: dict[int, _Block] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    stop: str | None = None
    model: str = ""
    finished: bool = False


async def _read_stream(
    stream: Any, turn: TurnCall, config: ProviderConfig, model_name: str
) -> Completion:
    """Consume the event stream into a Completion; no message_stop means the stream was cut."""
    acc = _Assembly()
    events = 0
    async for event in stream:
        events += 1
        await turn.chunk()
        await _add_event(acc, event, turn)
    if events == 0:
        raise turn.empty_answer(config)
    if not acc.finished:
        raise errors.stream_cut(config.key, "no message_stop before the stream ended")
    return _completion(acc, model_name)


async def _read_body(
    body: Any, turn: TurnCall, config: ProviderConfig, model_name: str
) -> Completion:
    """A whole Messages response (from a server that does not stream) as a Completion."""
    if not isinstance(body, Mapping) or not isinstance(body.get("content"), list):
        raise errors.incompatible(config.key, "the answer is JSON but not a message")
    await turn.chunk()
    acc = _Assembly(model=str(body.get("model") or ""), stop=body.get("stop_reason"))
    _merge_usage(acc.usage, body.get("usage"))
    for index, block in enumerate(body["content"]):
        kind = str(_field(block, "type") or "")
        part = {
            "text": _field(block, "text"),
            "thinking": _field(block, "thinking"),
            "tool_use": json.dumps(_field(block, "input") or {}),
        }.get(kind)
        acc.blocks[index] = _Block(
            type=kind,
            id=str(_field(block, "id") or ""),
            name=str(_field(block, "name") or ""),
            parts=[part] if isinstance(part, str) and part else [],
        )
        if kind == "text" and part:
            await turn.delta(part)
    return _completion(acc, model_name)


def _completion(acc: _Assembly, model_name: str) -> Completion:
    """What an assembled answer says, as a Completion."""
    ordered = [block for _, block in sorted(acc.blocks.items())]
    calls = [
        ToolCall(id=b.id, name=b.name, arguments="".join(b.parts) or "{}")
        for b in ordered
        if b.type == "tool_use"
    ]
    thinking = "".join(part for b in ordered if b.type == "thinking" for part in b.parts)
    return Completion(
        text="".join(part for b in ordered if b.type == "text" for part in b.parts),
        tool_calls=calls,
        reasoning=thinking or None,
        usage=acc.usage,
        stop_reason=STOP_REASONS.get(acc.stop or "", acc.stop or "stop"),
        model=acc.model or model_name,
    )


async def _add_event(acc: _Assembly, event: Any, turn: TurnCall) -> None:
    """Fold one stream event into the assembly; text goes to the callback as it arrives."""
    kind = getattr(event, "type", "")
    if kind == "message_start":
        acc.model = event.message.model or ""
        _merge_usage(acc.usage, getattr(event.message, "usage", None))
    elif kind == "content_block_start":
        block = event.content_block
        acc.blocks[event.index] = _Block(
            type=block.type,
            id=getattr(block, "id", "") or "",
            name=getattr(block, "name", "") or "",
        )
    elif kind == "content_block_delta":
        await _add_delta(acc.blocks.setdefault(event.index, _Block(type="text")), event.delta, turn)
    elif kind == "message_delta":
        acc.stop = event.delta.stop_reason or acc.stop
        _merge_usage(acc.usage, getattr(event, "usage", None))
    elif kind == "message_stop":
        acc.finished = True


async def _add_delta(block: _Block, delta: Any, turn: TurnCall) -> None:
    """Append one delta to its block."""
    kind = getattr(delta, "type", "")
    if kind == "text_delta":
        block.parts.append(delta.text)
        await turn.delta(delta.text)
    elif kind == "input_json_delta":
        block.parts.append(delta.partial_json)
    elif kind == "thinking_delta":
        block.parts.append(delta.thinking)


def _merge_usage(usage: Usage, raw: Any) -> None:
    """Update counts from message_start or message_delta usage (both cumulative, fields optional)."""
    if raw is None:
        return
    fields = {
        "input_tokens": "input",
        "output_tokens": "output",
        "cache_read_input_tokens": "cache_read",
        "cache_creation_input_tokens": "cache_write",
    }
    for vendor, ours in fields.items():
        value = _field(raw, vendor)
        if value is not None:
            setattr(usage, ours, int(value))
    thinking = _field(_field(raw, "output_tokens_details"), "thinking_tokens")
    if thinking is not None:
        usage.reasoning = int(thinking)


def _field(obj: Any, name: str) -> Any:
    """A field of an SDK object or a plain dict."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)
