"""A chat request as scripts see it, read from either vendor's wire format."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Api = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class FakeRequest:
    """A chat request reduced to what scripts look at."""

    api: Api
    model: str
    messages: tuple[Mapping[str, Any], ...]
    body: Mapping[str, Any]
    stream: bool
    task: str
    turn: int
    last_tool_result: str
    conversation_key: str

    @classmethod
    def from_body(cls, api: Api, body: Mapping[str, Any]) -> FakeRequest:
        """Build from a request body already checked for shape by the server."""
        messages = tuple(m for m in body.get("messages", []) if isinstance(m, Mapping))
        if api == "openai":
            last_result = _openai_last_tool_result(messages)
        else:
            last_result = _anthropic_last_tool_result(messages)
        return cls(
            api=api,
            model=str(body.get("model", "")),
            messages=messages,
            body=body,
            stream=body.get("stream") is True,
            task=_first_user_text(messages),
            turn=sum(1 for m in messages if m.get("role") == "assistant"),
            last_tool_result=last_result,
            conversation_key=conversation_key(messages),
        )


def conversation_key(messages: tuple[Mapping[str, Any], ...] | list[Any]) -> str:
    """A stable hash of the messages, so fault counters are per conversation state."""
    canonical = json.dumps(list(messages), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def content_text(content: Any) -> str:
    """Text of a message content: a string, or the `text` parts (OpenAI) or blocks
    (Anthropic) of a list; both vendors spell a text piece `{"type": "text", "text": …}`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, Mapping) and p.get("type") == "text"
        )
    return ""


def _first_user_text(messages: tuple[Mapping[str, Any], ...]) -> str:
    """The first user message's text (the agent's task)."""
    for message in messages:
        if message.get("role") == "user":
            return content_text(message.get("content"))
    return ""


def _openai_last_tool_result(messages: tuple[Mapping[str, Any], ...]) -> str:
    """Content of the last `role: tool` message."""
    for message in reversed(messages):
        if message.get("role") == "tool":
            return content_text(message.get("content"))
    return ""


def _anthropic_last_tool_result(messages: tuple[Mapping[str, Any], ...]) -> str:
    """Content of the last `tool_result` block."""
    for message in reversed(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in reversed(content):
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                return content_text(block.get("content"))
    return ""
