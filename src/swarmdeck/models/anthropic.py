"""ChatModel over the Anthropic Messages API, streamed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anthropic

from swarmdeck.models import errors
from swarmdeck.models.adapter import VendorAdapter
from swarmdeck.models.adapter import field_of as _field
from swarmdeck.models.edit_shapes import edit_shape, to_vendor
from swarmdeck.models.retry import TurnCall
from swarmdeck.models.tool_search import (
    CACHE_POINT,
    SERVER_BLOCKS,
    answer_blocks,
    as_dict,
    json_input,
    tools_block,
    vendor_blocks,
)
from swarmdeck.models.types import Completion, Message, ToolCall, ToolSpec, Usage

# Anthropic's stop reasons in the neutral (Chat Completions) vocabulary.
STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}
# How many times one turn the server paused is sent back to go on (the SDKs' examples and
# LangChain's middleware stop at 5 to 8).
CONTINUATIONS_MAX = 5


class AnthropicModel(VendorAdapter["_Assembly"]):
    """Streams a Messages turn and reassembles text, tool_use blocks, thinking and usage."""

    sdk = anthropic
    client_class = anthropic.AsyncAnthropic
    unfinished = "no message_stop before the stream ended"

    async def _turn(self, turn: TurnCall) -> Completion:
        """One model turn. A turn the server paused (`pause_turn`: its own tool loop ran
        long, a client tool not yet called) is sent back as it stands, with no message of
        ours, and goes on where it stopped; the parts come back as one turn."""
        completion = await super()._turn(turn)
        for _ in range(CONTINUATIONS_MAX):
            if completion.stop_reason != "pause_turn":
                return completion
            so_far = Message(
                role="assistant",
                content=completion.text,
                tool_calls=tuple(completion.tool_calls),
                blocks=completion.blocks,
            )
            going_on = replace(turn, messages=[*turn.messages, so_far], _prompt_tokens=None)
            more = await super()._turn(going_on)
            completion = _continued(completion, more)
        if completion.stop_reason == "pause_turn":
            raise errors.still_paused(self.config.key, CONTINUATIONS_MAX)
        return completion

    def request_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The JSON body of the request: system apart, tool results as user blocks, deferred
        tools for the vendor's tool search (models/tool_search.py), and prompt-cache
        breakpoints on the tools, the system prompt and the last message (the prompt only
        grows at its end between compactions, so each turn reads the prefix the turn
        before wrote)."""
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
            body["tools"] = tools_block(tools, self.config.vendor_tool_search)
        if body["messages"]:
            body["messages"][-1]["content"][-1]["cache_control"] = dict(CACHE_POINT)
        return to_vendor(edit_shape(self.config.kind, self.config.edit_tools), body)

    async def _open(self, client: anthropic.AsyncAnthropic, request: dict[str, Any]) -> Any:
        return await client.messages.create(**request)

    def _assembly(self) -> _Assembly:
        return _Assembly()

    async def _fold(self, acc: _Assembly, event: Any, turn: TurnCall) -> None:
        await _add_event(acc, event, turn)

    def _finished(self, acc: _Assembly) -> bool:
        return acc.finished

    def _completion(self, acc: _Assembly) -> Completion:
        return _completion(acc, self.model_name)

    async def _read_body(self, body: Any, turn: TurnCall) -> Completion:
        """A whole Messages response (from a server that does not stream) as a Completion."""
        if not isinstance(body, Mapping) or not isinstance(body.get("content"), list):
            raise errors.incompatible(self.config.key, "the answer is JSON but not a message")
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
                start=as_dict(block) if kind in SERVER_BLOCKS else {},
            )
            if kind == "text" and part:
                await turn.delta(part)
        return _completion(acc, self.model_name)


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
        return "user", _user_blocks(message)
    if message.blocks:
        return "assistant", vendor_blocks(message)
    blocks: list[dict[str, Any]] = (
        [{"type": "text", "text": message.content}] if message.content else []
    )
    blocks += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments)}
        for call in message.tool_calls
    ]
    return "assistant", blocks


def _user_blocks(message: Message) -> list[dict[str, Any]]:
    """A user message's text; the part its family's sessions share (runtime/family.py) in a
    block of its own with a cache breakpoint, so a sibling's request is served it."""
    text, cut = message.content, message.shared_upto
    if not text:
        return []
    if 0 < cut < len(text):
        shared = {"type": "text", "text": text[:cut], "cache_control": dict(CACHE_POINT)}
        return [shared, {"type": "text", "text": text[cut:]}]
    return [{"type": "text", "text": text}]


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
    # A server block's start as the API sent it (a search result comes whole in it).
    start: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Assembly:
    """Everything the event stream has said so far."""

    blocks: dict[int, _Block] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    stop: str | None = None
    model: str = ""
    finished: bool = False


def _completion(acc: _Assembly, model_name: str) -> Completion:
    """What an assembled answer says, as a Completion."""
    ordered = [block for _, block in sorted(acc.blocks.items())]
    calls = [
        ToolCall(id=b.id, name=b.name, arguments="".join(b.parts) or "{}")
        for b in ordered
        if b.type == "tool_use"
    ]
    thinking = "".join(part for b in ordered if b.type == "thinking" for part in b.parts)
    kept = answer_blocks([(b.type, _vendor_block(b)) for b in ordered])
    return Completion(
        text="".join(part for b in ordered if b.type == "text" for part in b.parts),
        tool_calls=calls,
        reasoning=thinking or None,
        usage=acc.usage,
        stop_reason=STOP_REASONS.get(acc.stop or "", acc.stop or "stop"),
        model=acc.model or model_name,
        blocks=kept,
    )


def _continued(paused: Completion, more: Completion) -> Completion:
    """A paused turn and what the server went on with, as the one turn they make: the
    blocks of both in order (the next request sends them back as the vendor wrote them),
    the counts of both calls."""
    usage = Usage()
    usage.add(paused.usage)
    usage.add(more.usage)

    def blocks_of(part: Completion) -> list[dict[str, Any]]:
        if part.blocks:
            return [dict(b) for b in part.blocks]
        plain = Message(role="assistant", content=part.text, tool_calls=tuple(part.tool_calls))
        return _blocks(plain)[1]

    reasoning = "".join(r for r in (paused.reasoning, more.reasoning) if r)
    costs = [c for c in (paused.cost_usd, more.cost_usd) if c is not None]
    return Completion(
        text=paused.text + more.text,
        tool_calls=[*paused.tool_calls, *more.tool_calls],
        reasoning=reasoning or None,
        usage=usage,
        stop_reason=more.stop_reason,
        model=more.model or paused.model,
        blocks=(*blocks_of(paused), *blocks_of(more)),
        cost_usd=sum(costs) if costs else None,
    )


def _vendor_block(block: _Block) -> dict[str, Any]:
    """One assembled block as the API would take it back."""
    text = "".join(block.parts)
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": _tool_input(text)}
    if block.type == "server_tool_use":
        return {**block.start, "input": json_input(block.parts, block.start)}
    if block.type in SERVER_BLOCKS:
        return dict(block.start)
    return {"type": block.type, "text": text}


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
            start=as_dict(block) if block.type in SERVER_BLOCKS else {},
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
