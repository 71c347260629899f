"""ChatModel over OpenAI's Responses API (`POST /v1/responses`), streamed through the
official SDK, with the vendor's hosted tool search for deferred tools
(models/responses_items.py)."""

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
from swarmdeck.models.openai_compat import post_streamed
from swarmdeck.models.responses_items import (
    as_item,
    custom_patch,
    error_status,
    input_items,
    instructions,
    kept_items,
    map_usage,
    stop_reason,
    tools_list,
)
from swarmdeck.models.retry import TurnCall
from swarmdeck.models.types import Completion, Message, ToolCall, ToolSpec, Usage

# The events that end a response.
_ENDED = frozenset({"response.completed", "response.incomplete"})
# Output items that are calls of our tools; the events that stream their arguments.
_CALLS = frozenset({"function_call", "custom_tool_call"})
_ARGUMENT_DELTAS = {
    "response.function_call_arguments.delta": "function_call",
    "response.custom_tool_call_input.delta": "custom_tool_call",
}


class OpenAIResponsesModel(VendorAdapter["_Assembly"]):
    """Streams a Responses turn and reassembles text, function calls, the hosted search's
    items, reasoning summaries and usage."""

    sdk = openai
    client_class = openai.AsyncOpenAI
    unfinished = "no response.completed before the stream ended"

    def request_body(self, messages: list[Message], tools: list[ToolSpec]) -> dict[str, Any]:
        """The JSON body of the request: system text as `instructions`, the conversation as
        input items, deferred tools behind the hosted tool search where it is on."""
        body: dict[str, Any] = {
            "model": self.model_name,
            "input": input_items(messages),
            "stream": True,
            "max_output_tokens": self.config.output_tokens,
        }
        system = instructions(messages)
        if system:
            body["instructions"] = system
        if tools:
            body["tools"] = tools_list(tools, self.config.vendor_tool_search == "hosted")
        # The text editor is Anthropic's alone; apply_patch may go as a custom tool.
        body = to_vendor("plain", body)
        if edit_shape(self.config.kind, self.config.edit_tools) == "openai_apply_patch":
            body = custom_patch(body)
        return body

    async def _open(self, client: openai.AsyncOpenAI, request: dict[str, Any]) -> Any:
        # The plain body, not responses.create(): see post_streamed.
        return await post_streamed(client, "/responses", request)

    def _assembly(self) -> _Assembly:
        return _Assembly()

    async def _fold(self, acc: _Assembly, event: Any, turn: TurnCall) -> None:
        await _add_event(acc, event, turn, self.config.key)

    def _finished(self, acc: _Assembly) -> bool:
        return acc.status is not None

    def _completion(self, acc: _Assembly) -> Completion:
        return _completion(acc, self.model_name)

    async def _read_body(self, body: Any, turn: TurnCall) -> Completion:
        """A whole `response` object (from a server that does not stream) as a Completion."""
        output = _get(body, "output")
        if not isinstance(body, Mapping) or not isinstance(output, list):
            raise errors.incompatible(self.config.key, "the answer is JSON but not a response")
        await turn.chunk()
        if body.get("status") == "failed":
            raise _failure(body.get("error"), self.config.key)
        acc = _Assembly(model=str(body.get("model") or ""))
        for index, item in enumerate(output):
            acc.items[index] = _Item(as_item(item), done=True)
        acc.end(body)
        text = acc.text()
        if text:
            await turn.delta(text)
        return _completion(acc, self.model_name)


@dataclass
class _Item:
    """One output item: as the server last showed it, and its text or arguments so far."""

    item: dict[str, Any]
    parts: list[str] = field(default_factory=list)
    done: bool = False

    @property
    def type(self) -> str:
        return str(self.item.get("type") or "")

    def text(self) -> str:
        """A message's text: as streamed, else its output_text parts."""
        if self.parts:
            return "".join(self.parts)
        content = self.item.get("content")
        parts = content if isinstance(content, list) else []
        return "".join(
            str(part.get("text") or "")
            for part in parts
            if isinstance(part, Mapping) and part.get("type") == "output_text"
        )

    def call(self) -> ToolCall:
        """A function (or custom tool) call: its arguments (or raw input) as the finished
        item has them, else as streamed."""
        field = "input" if self.type == "custom_tool_call" else "arguments"
        arguments = self.item.get(field) if self.done else None
        if not isinstance(arguments, str) or not arguments:
            arguments = "".join(self.parts)
        call_id = str(self.item.get("call_id") or "") or f"call_{uuid.uuid4().hex[:24]}"
        return ToolCall(call_id, str(self.item.get("name") or ""), arguments or "{}")


@dataclass
class _Assembly:
    """Everything the event stream has said so far."""

    items: dict[int, _Item] = field(default_factory=dict)
    reasoning: list[str] = field(default_factory=list)
    usage: Usage | None = None
    status: str | None = None
    incomplete: Any = None
    model: str = ""

    def end(self, response: Any) -> None:
        """The response's last word: its status, why it is incomplete, its usage."""
        self.model = self.model or str(_get(response, "model") or "")
        self.status = str(_get(response, "status") or "completed")
        self.incomplete = _get(response, "incomplete_details")
        usage = _get(response, "usage")
        if usage:
            self.usage = map_usage(usage)
        if not self.reasoning:
            for item in self.ordered():
                if item.type == "reasoning":
                    self.reasoning += _summary(item.item)

    def ordered(self) -> list[_Item]:
        return [item for _, item in sorted(self.items.items())]

    def text(self) -> str:
        return "".join(i.text() for i in self.ordered() if i.type == "message")


def _summary(item: Mapping[str, Any]) -> list[str]:
    summary = item.get("summary")
    parts = summary if isinstance(summary, list) else []
    return [str(part.get("text") or "") for part in parts if isinstance(part, Mapping)]


def _completion(acc: _Assembly, model_name: str) -> Completion:
    """What an assembled answer says, as a Completion."""
    ordered = acc.ordered()
    calls = [i.call() for i in ordered if i.type in _CALLS]
    return Completion(
        text=acc.text(),
        tool_calls=calls,
        reasoning="".join(acc.reasoning) or None,
        usage=acc.usage or Usage(),
        stop_reason=stop_reason(acc.status, acc.incomplete, bool(calls)),
        model=acc.model or model_name,
        blocks=kept_items([_whole(i) for i in ordered]),
    )


def _whole(item: _Item) -> dict[str, Any]:
    """An item as the API would take it back: the finished one, or what streamed of it."""
    if item.done:
        return dict(item.item)
    if item.type in _CALLS:
        field = "input" if item.type == "custom_tool_call" else "arguments"
        return {**item.item, field: "".join(item.parts), "status": "completed"}
    return dict(item.item)


async def _add_event(acc: _Assembly, event: Any, turn: TurnCall, provider: str) -> None:
    """Fold one stream event into the assembly; text goes to the callback as it arrives."""
    kind = str(_get(event, "type") or "")
    index = _get(event, "output_index")
    if kind in ("response.created", "response.in_progress"):
        acc.model = acc.model or str(_get(_get(event, "response"), "model") or "")
    elif kind == "response.output_item.added":
        acc.items[int(index)] = _Item(as_item(_get(event, "item")))
    elif kind == "response.output_item.done":
        known = acc.items.get(int(index))
        acc.items[int(index)] = _Item(
            as_item(_get(event, "item")), parts=known.parts if known else [], done=True
        )
    elif kind == "response.output_text.delta":
        delta = str(_get(event, "delta") or "")
        acc.items.setdefault(int(index), _Item({"type": "message"})).parts.append(delta)
        await turn.delta(delta)
    elif kind in _ARGUMENT_DELTAS:
        delta = str(_get(event, "delta") or "")
        blank = _Item({"type": _ARGUMENT_DELTAS[kind]})
        acc.items.setdefault(int(index), blank).parts.append(delta)
    elif kind == "response.reasoning_summary_text.delta":
        acc.reasoning.append(str(_get(event, "delta") or ""))
    elif kind in _ENDED:
        acc.end(_get(event, "response"))
    elif kind == "response.failed":
        raise _failure(_get(_get(event, "response"), "error"), provider)
    elif kind == "error":
        raise _failure(event, provider)


def _failure(error: Any, provider: str) -> Exception:
    """A failure the server said inside its answer, classified as its code says."""
    status, body = error_status(error)
    return errors.classify(status, body, None, provider=provider)
