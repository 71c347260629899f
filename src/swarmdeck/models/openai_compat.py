"""ChatModel over OpenAI-compatible Chat Completions (OpenAI, DeepSeek, Kimi, GLM, vLLM, Ollama)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import openai

from swarmdeck.models import errors
from swarmdeck.models.adapter import VendorAdapter
from swarmdeck.models.adapter import field_of as _get
from swarmdeck.models.edit_shapes import edit_shape, to_vendor
from swarmdeck.models.retry import TurnCall
from swarmdeck.models.types import Completion, Message, ToolCall, ToolSpec, Usage


class OpenAICompatModel(VendorAdapter["_Assembly"]):
    """Streams a Chat Completions turn and reassembles text, tool calls, reasoning and usage."""

    sdk = openai
    client_class = openai.AsyncOpenAI
    unfinished = "no finish_reason before the stream ended"

    def request_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The JSON body of the request, with the provider's quirks applied."""
        config = self.config
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": to_openai_messages(
                messages, echo_reasoning=config.has_quirk("reasoning_echo")
            ),
            "stream": True,
        }
        if not config.has_quirk("no_stream_usage"):
            body["stream_options"] = {"include_usage": True}
        cap = "max_completion_tokens" if config.has_quirk("max_completion_tokens") else "max_tokens"
        body[cap] = config.output_tokens
        # Chat Completions has no tool search of its own: a deferred tool is not sent.
        tools = [t for t in tools if not t.deferred]
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
            if config.has_quirk("tool_choice_auto_only"):
                # GLM rejects every other tool_choice value; "auto" is also what we want.
                body["tool_choice"] = "auto"
        return to_vendor(edit_shape(config.kind, config.edit_tools), body)

    async def _open(self, client: openai.AsyncOpenAI, request: dict[str, Any]) -> Any:
        return await post_streamed(client, "/chat/completions", request)

    def _assembly(self) -> _Assembly:
        return _Assembly()

    async def _fold(self, acc: _Assembly, chunk: Any, turn: TurnCall) -> None:
        acc.model = acc.model or (_get(chunk, "model") or "")
        usage = _get(chunk, "usage")
        for choice in _get(chunk, "choices") or ():
            # Kimi reports usage inside the choice instead of the chunk.
            usage = usage or _get(choice, "usage")
            await _add_choice(acc, choice, turn)
        if usage:
            acc.usage = map_usage(usage)

    def _finished(self, acc: _Assembly) -> bool:
        return acc.finish is not None

    def _completion(self, acc: _Assembly) -> Completion:
        return _completion(acc, self.model_name)

    async def _read_body(self, body: Any, turn: TurnCall) -> Completion:
        """A whole chat.completion body (from a server that does not stream) as a Completion."""
        choices = _get(body, "choices") or ()
        if not isinstance(body, Mapping) or not choices:
            raise errors.incompatible(
                self.config.key, "the answer is JSON but not a chat completion"
            )
        await turn.chunk()
        acc = _Assembly(model=_get(body, "model") or "")
        choice = choices[0]
        message = _get(choice, "message") or {}
        thought = _get(message, "reasoning_content") or _get(message, "reasoning")
        if isinstance(thought, str) and thought:
            acc.reasoning.append(thought)
        text = _get(message, "content")
        if isinstance(text, str) and text:
            acc.text.append(text)
            await turn.delta(text)
        for index, call in enumerate(_get(message, "tool_calls") or ()):
            acc.add_call_delta({**call, "index": index})
        acc.finish = _get(choice, "finish_reason") or "stop"
        usage = _get(body, "usage") or _get(choice, "usage")
        if usage:
            acc.usage = map_usage(usage)
        return _completion(acc, self.model_name)


async def post_streamed(
    client: openai.AsyncOpenAI, path: str, body: dict[str, Any]
) -> openai.AsyncStream[object]:
    """POST a streamed request (Chat Completions, Responses) whose body is already plain
    JSON; the events come back as the plain dicts the server sent.

    `chat.completions.create()` first re-validates the body against the SDK's typed
    params, which cost 0.18 ms per message: 7 ms for a 40-message conversation, 340 ms
    at 2,000, on every turn, to return the same body (`responses.create()` 0.26 ms an
    input item); then it builds a pydantic model of every event, which we read a few
    fields of. `post()` sends the same request with the same auth, SSE parsing and
    errors, without either pass.
    """
    return await client.post(
        path,
        body=body,
        cast_to=object,
        options={"security": {"bearer_auth": True}},
        stream=True,
        stream_cls=openai.AsyncStream[object],
    )


def to_openai_messages(messages: list[Message], *, echo_reasoning: bool) -> list[dict[str, Any]]:
    """Neutral messages as Chat Completions messages; system text first, in one message."""
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        if message.role == "user":
            out.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            out.append(_assistant_message(message, echo_reasoning))
        elif message.role == "tool":
            content = f"Error: {message.content}" if message.is_error else message.content
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": content}
            )
    return out


def _assistant_message(message: Message, echo_reasoning: bool) -> dict[str, Any]:
    """An assistant turn, with its tool calls and (for DeepSeek/Kimi) its reasoning."""
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    if message.tool_calls:
        # Vendors want null, not "", next to tool calls.
        out["content"] = message.content or None
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments or "{}"},
            }
            for call in message.tool_calls
        ]
    if echo_reasoning:
        # DeepSeek rejects an assistant message without the field; "" is accepted.
        out["reasoning_content"] = message.reasoning or ""
    return out


@dataclass
class _PartialCall:
    """A tool call being streamed: id and name arrive once, arguments in pieces."""

    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Assembly:
    """Everything a stream has said so far."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    usage: Usage | None = None
    finish: str | None = None
    model: str = ""

    def add_call_delta(self, delta: Any) -> None:
        """Merge one streamed tool-call piece, keyed by its index."""
        index = _get(delta, "index")
        call_id = _get(delta, "id")
        if index is None:
            # Some servers omit the index: a new id starts a call, otherwise it continues the last.
            known = [i for i, c in self.calls.items() if call_id and c.id == call_id]
            index = (
                known[0]
                if known
                else (len(self.calls) if call_id or not self.calls else max(self.calls))
            )
        partial = self.calls.setdefault(int(index), _PartialCall())
        if call_id and not partial.id:
            partial.id = call_id
        # A custom (freeform) tool's call carries `custom: {name, input}` (models/edit_shapes.py).
        function = _get(delta, "function") or _get(delta, "custom")
        name = _get(function, "name")
        # Some vendors repeat the name in later chunks; appending it would corrupt it.
        if name and not partial.name:
            partial.name = name
        arguments = _get(function, "arguments") or _get(function, "input")
        if arguments:
            partial.arguments.append(arguments)

    def tool_calls(self) -> list[ToolCall]:
        """The finished calls in index order; a missing id gets a local one."""
        return [
            ToolCall(
                id=partial.id or f"call_{uuid.uuid4().hex[:24]}",
                name=partial.name,
                arguments="".join(partial.arguments) or "{}",
            )
            for _, partial in sorted(self.calls.items())
        ]


def _completion(acc: _Assembly, model_name: str) -> Completion:
    """What an assembled answer says, as a Completion."""
    assert acc.finish is not None
    calls = acc.tool_calls()
    return Completion(
        text="".join(acc.text),
        tool_calls=calls,
        reasoning="".join(acc.reasoning) or None,
        usage=acc.usage or Usage(),
        # The legacy `function_call` is a tool call too; the rest are neutral already.
        stop_reason="tool_calls" if acc.finish == "function_call" else acc.finish,
        model=acc.model or model_name,
    )


async def _add_choice(acc: _Assembly, choice: Any, turn: TurnCall) -> None:
    """Fold one choice delta into the assembly; text goes to the callback as it arrives."""
    delta = _get(choice, "delta")
    if delta is not None:
        # DeepSeek and Kimi say `reasoning_content`; vLLM and Ollama say `reasoning`.
        thought = _get(delta, "reasoning_content") or _get(delta, "reasoning")
        if isinstance(thought, str) and thought:
            acc.reasoning.append(thought)
        text = _get(delta, "content")
        if text:
            acc.text.append(text)
            await turn.delta(text)
        for call_delta in _get(delta, "tool_calls") or ():
            acc.add_call_delta(call_delta)
    finish = _get(choice, "finish_reason")
    if finish:
        acc.finish = finish


def map_usage(raw: Any) -> Usage:
    """Chat Completions usage as neutral Usage; input excludes cached tokens."""
    prompt = int(_get(raw, "prompt_tokens") or 0)
    cached = _get(_get(raw, "prompt_tokens_details"), "cached_tokens")
    if cached is None:
        # DeepSeek: prompt_cache_hit_tokens; Kimi: cached_tokens at the top level.
        cached = _get(raw, "prompt_cache_hit_tokens") or _get(raw, "cached_tokens")
    cached = int(cached or 0)
    reasoning = _get(_get(raw, "completion_tokens_details"), "reasoning_tokens")
    return Usage(
        input=max(0, prompt - cached),
        output=int(_get(raw, "completion_tokens") or 0),
        reasoning=int(reasoning or 0),
        cache_read=cached,
    )
