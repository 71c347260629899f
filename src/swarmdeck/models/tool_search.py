"""Anthropic's tool search: tools on demand done by the vendor.

The request carries every tool: the core ones as usual, the others with `defer_loading:
true`, and the tool search tool (its `bm25` or `regex` variant). The model sees the core
tools and the search; when it searches, the server answers in the same turn with a
`server_tool_use` block and a `tool_search_tool_result` block whose `tool_reference`s the
API expands into the found tools' schemas, from then on callable. The tools block never
changes from turn to turn (what was found lives in the history), so the cached prefix
holds; the history must then be sent back as the vendor wrote it, server blocks and all.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from swarmdeck.models.types import Message, ToolSpec

# The variants of the tool search tool: their type and the name they must have.
SEARCH_TOOLS = {
    "bm25": ("tool_search_tool_bm25_20251119", "tool_search_tool_bm25"),
    "regex": ("tool_search_tool_regex_20251119", "tool_search_tool_regex"),
}
# Blocks of an answer that the vendor's own tools wrote.
SERVER_BLOCKS = frozenset({"server_tool_use", "tool_search_tool_result"})
# A prompt-cache breakpoint: the prefix up to the block that carries it is cached.
CACHE_POINT = {"type": "ephemeral"}


def tools_block(tools: list[ToolSpec], search: str | None) -> list[dict[str, Any]]:
    """The request's tools: those shown, then the search tool, then the deferred ones
    (none without a search to find them); the cache breakpoint on the last tool shown, as
    the deferred ones are not part of the prompt."""
    shown = [_tool(t) for t in tools if not t.deferred]
    deferred = [t for t in tools if t.deferred]
    if search is not None and deferred:
        kind, name = SEARCH_TOOLS[search]
        shown.append({"type": kind, "name": name})
    if shown:
        shown[-1]["cache_control"] = dict(CACHE_POINT)
    if search is None:
        return shown
    return [*shown, *({**_tool(t), "defer_loading": True} for t in deferred)]


def _tool(tool: ToolSpec) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def vendor_blocks(message: Message) -> list[dict[str, Any]]:
    """An assistant turn's blocks as the vendor wrote them (copies: the request's cache
    breakpoint must not mark the stored turn)."""
    return [copy.deepcopy(dict(block)) for block in message.blocks]


def answer_blocks(blocks: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], ...]:
    """The blocks to keep of an answer (type, block): all of its text, tool use and
    server blocks when the vendor ran a tool of its own in it, else none (the neutral
    message says it all)."""
    if not any(kind in SERVER_BLOCKS for kind, _ in blocks):
        return ()
    kept = [
        block
        for kind, block in blocks
        if kind in SERVER_BLOCKS or kind == "tool_use" or (kind == "text" and block.get("text"))
    ]
    return tuple(kept)


def as_dict(block: Any) -> dict[str, Any]:
    """An SDK content block (or a plain dict) as the JSON the API sent."""
    if isinstance(block, Mapping):
        return dict(block)
    to_dict = getattr(block, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict(mode="json", exclude_unset=True))
    return dict(block.model_dump(mode="json", exclude_unset=True))


def json_input(parts: list[str], start: Mapping[str, Any]) -> dict[str, Any]:
    """A streamed block's input: its deltas joined, else what its start said."""
    text = "".join(parts)
    if not text:
        value = start.get("input")
        return dict(value) if isinstance(value, Mapping) else {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
