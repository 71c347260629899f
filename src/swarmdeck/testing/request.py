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

    @property
    def tool_search(self) -> str | None:
        """The tool search the request offers (Anthropic's `bm25` or `regex`), or None."""
        return search_variant(self.body)

    @property
    def found_tools(self) -> list[str]:
        """The deferred tools a tool search of this conversation returned, in order."""
        return found_tools(self.messages)


# Anthropic's tool search tools by type (dated and not): the variant, and the name each
# must have.
SEARCH_TOOL_TYPES = {
    "tool_search_tool_bm25_20251119": "bm25",
    "tool_search_tool_bm25": "bm25",
    "tool_search_tool_regex_20251119": "regex",
    "tool_search_tool_regex": "regex",
}
SEARCH_TOOL_NAMES = {
    "bm25": "tool_search_tool_bm25",
    "regex": "tool_search_tool_regex",
    "hosted": "tool_search",
}
# OpenAI's Responses API: its tool search tool (`hosted` unless the client runs it).
RESPONSES_SEARCH_TYPE = "tool_search"


def search_variant(body: Mapping[str, Any]) -> str | None:
    """The variant of the tool search tool a request's tools hold (Anthropic's `bm25` or
    `regex`, the Responses API's `hosted`), or None."""
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping):
            continue
        if tool.get("type") in SEARCH_TOOL_TYPES:
            return SEARCH_TOOL_TYPES[tool["type"]]
        if tool.get("type") == RESPONSES_SEARCH_TYPE and tool.get("execution") in (None, "server"):
            return "hosted"
    return None


def deferred_tools(body: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The request's tools with `defer_loading: true`, by name (those of a Responses
    namespace too)."""
    return {
        str(tool.get("name")): tool
        for tool, _space in _all_tools(body)
        if tool.get("defer_loading") is True
    }


def namespace_of(body: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The Responses namespace each namespaced tool of the request is in, by tool name."""
    return {str(tool.get("name")): space for tool, space in _all_tools(body) if space}


def _all_tools(body: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Every tool of a request with its namespace ({} outside one)."""
    found: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping):
            continue
        if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            found += [(t, tool) for t in tool["tools"] if isinstance(t, Mapping)]
        else:
            found.append((tool, {}))
    return found


def tool_references(block: Mapping[str, Any]) -> list[str]:
    """The tools a search result block (the server's, or a custom search's tool_result)
    references, or a Responses `tool_search_output` item carries."""
    if block.get("type") == "tool_search_output":
        return [name for name, _ in output_tools(block)]
    content = block.get("content")
    if isinstance(content, Mapping):
        content = content.get("tool_references")
    if not isinstance(content, list):
        return []
    return [
        str(ref.get("tool_name"))
        for ref in content
        if isinstance(ref, Mapping) and ref.get("type") == "tool_reference"
    ]


def found_tools(messages: tuple[Mapping[str, Any], ...] | list[Any]) -> list[str]:
    """The tools the search results of a conversation reference, in order, once each."""
    found: dict[str, None] = {}
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, Mapping) and block.get("type") in SEARCH_RESULTS:
                found.update(dict.fromkeys(tool_references(block)))
    return list(found)


def output_tools(item: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The tools a Responses `tool_search_output` item loaded, by name (a namespace's own
    tools included)."""
    tools = item.get("tools")
    found: list[tuple[str, Mapping[str, Any]]] = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, Mapping):
            continue
        if tool.get("type") == "namespace":
            found += output_tools(tool)
        elif isinstance(tool.get("name"), str):
            found.append((tool["name"], tool))
    return found


# Blocks that may carry tool references: the server search's result, a custom search's,
# the Responses API's search output.
SEARCH_RESULTS = ("tool_search_tool_result", "tool_result", "tool_search_output")


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
