"""What a request's prompt weighs, and what the vendors' prompt caches would serve of it.

A prompt is cut into segments in the order the vendors cache it: tool definitions, the
system prompt, then every message (OpenAI) or content block (Anthropic). Each segment
weighs a token per four characters of its text, and carries the hash of the whole prefix
that ends with it, so "the longest prefix seen before" is a set lookup per segment.

The two vendors cache differently, and so does this:
- OpenAI caches on its own: every prefix of every prompt is remembered, and a later prompt
  is served the longest one it starts with: whole segments, then, of the first segment that
  differs, what it shares in steps of 128 tokens, as OpenAI counts (reported as
  `usage.prompt_tokens_details.cached_tokens`, inside `prompt_tokens`).
- Anthropic caches only where the request puts `cache_control` breakpoints: the prefix up
  to each breakpoint is written (`cache_creation_input_tokens`), and a later prompt reads
  the longest such prefix found at, or up to 20 blocks before, one of its own breakpoints
  (`cache_read_input_tokens`); `input_tokens` is the rest.
Both serve nothing below a minimum prefix (1,024 tokens, as the vendors' smaller models),
and both keep prefixes per API key: every conversation made with one key shares them (a
swarm's members reuse the prefix their coordinator wrote), another key's never see them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from swarmdeck.testing.request import Api, deferred_tools, output_tools, tool_references

CHARS_PER_TOKEN = 4
DEFAULT_MIN_CACHED_TOKENS = 1024
# OpenAI serves a prefix in steps of this many tokens past the first whole segments.
BLOCK_TOKENS = 128
# How far before a breakpoint Anthropic looks for a prefix it wrote earlier.
LOOKBACK_BLOCKS = 20


@dataclass(frozen=True)
class Segment:
    """One piece of a prompt: its weight, the hash of the prefix ending with it, and whether
    the request marked it as a cache breakpoint; `blocks`, the hashes of the prefixes that
    end inside it after each BLOCK_TOKENS of its text (OpenAI serves a prefix that ends
    there too)."""

    tokens: int
    prefix_hash: str
    breakpoint: bool
    blocks: tuple[str, ...] = ()


@dataclass(frozen=True)
class CacheUse:
    """A prompt's tokens, and the part the cache served (read) or took in (written)."""

    total: int
    read: int = 0
    written: int = 0

    @property
    def uncached(self) -> int:
        """Tokens neither read from nor written to the cache."""
        return self.total - self.read - self.written


def tokens_of(text: str) -> int:
    """A token per four characters, rounded up (the fake's stand-in for a tokenizer)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def _text(value: Any) -> str:
    """The text a content value carries: a string, or the text of its parts or blocks."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_text(part.get("text", "")) for part in value if isinstance(part, Mapping))
    return ""


def _tool_text(tool: Mapping[str, Any]) -> str:
    """A tool definition as the model reads it: name, description, schema (a Responses
    namespace: its name and description, and those of its tools not deferred)."""
    if tool.get("type") == "namespace":
        inner = tool.get("tools") if isinstance(tool.get("tools"), list) else []
        shown = "".join(
            _tool_text(t) for t in inner if isinstance(t, Mapping) and not t.get("defer_loading")
        )
        return f"{tool.get('name', '')}{tool.get('description', '')}{shown}"
    function = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    schema = function.get("parameters", function.get("input_schema", {}))
    return f"{function.get('name', '')}{function.get('description', '')}{json.dumps(schema)}"


def _openai_pieces(body: Mapping[str, Any]) -> list[tuple[Any, str, bool]]:
    """(what is hashed, its text, breakpoint) in cache order. A tool deferred to the
    Responses API's hosted search weighs its name and description (what the model sees of
    it) until a search loads it: its schema then weighs where the search's output stands."""
    pieces: list[tuple[Any, str, bool]] = [
        (
            tool,
            _deferred_text(tool) if tool.get("defer_loading") is True else _tool_text(tool),
            False,
        )
        for tool in body.get("tools") or []
        if isinstance(tool, Mapping)
    ]
    for message in body.get("messages") or []:
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        text = _text(content)
        for block in content if isinstance(content, list) else []:
            if isinstance(block, Mapping) and block.get("type") == "tool_search_output":
                text += "".join(_tool_text(tool) for _, tool in output_tools(block))
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                text += f"{function.get('name', '')}{function.get('arguments', '')}"
        pieces.append((message, text, False))
    return pieces


def _deferred_text(tool: Mapping[str, Any]) -> str:
    """What the model sees of a deferred Responses tool before a search loads it."""
    return f"{tool.get('name', '')}{tool.get('description', '')}"


def _block_text(block: Mapping[str, Any], deferred: Mapping[str, Mapping[str, Any]]) -> str:
    """The text of one Anthropic content block; a search result's is the schemas of the
    deferred tools it found, as the API expands them where the reference stands."""
    kind = block.get("type")
    if kind in ("tool_use", "server_tool_use"):
        return f"{block.get('name', '')}{json.dumps(block.get('input', {}))}"
    found = "".join(_tool_text(deferred[n]) for n in tool_references(block) if n in deferred)
    if kind == "tool_result":
        return _text(block.get("content")) + found
    return _text(block.get("text", "")) + found


def _marked(item: Mapping[str, Any]) -> bool:
    return isinstance(item.get("cache_control"), Mapping)


def _unmarked(item: Mapping[str, Any]) -> dict[str, Any]:
    """The item as hashed: a breakpoint does not change what the prefix holds."""
    return {k: v for k, v in item.items() if k != "cache_control"}


def _anthropic_pieces(body: Mapping[str, Any]) -> list[tuple[Any, str, bool]]:
    """(what is hashed, its text, breakpoint) in cache order: tools, system, blocks."""
    # A deferred tool is not in the prompt until a search finds it (testing/tool_search).
    deferred = deferred_tools(body)
    pieces: list[tuple[Any, str, bool]] = [
        (_unmarked(tool), _tool_text(tool), _marked(tool))
        for tool in body.get("tools") or []
        if isinstance(tool, Mapping) and tool.get("name") not in deferred
    ]
    system = body.get("system")
    if isinstance(system, str) and system:
        pieces.append(({"system": system}, system, False))
    elif isinstance(system, list):
        pieces += [
            (_unmarked(b), _text(b.get("text", "")), _marked(b))
            for b in system
            if isinstance(b, Mapping)
        ]
    for message in body.get("messages") or []:
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):
            pieces.append(({"role": role, "text": content}, content, False))
            continue
        for block in content if isinstance(content, list) else []:
            if isinstance(block, Mapping):
                pieces.append(
                    (
                        {"role": role, **_unmarked(block)},
                        _block_text(block, deferred),
                        _marked(block),
                    )
                )
    return pieces


def segments(api: Api, body: Mapping[str, Any]) -> list[Segment]:
    """The request's prompt as segments in cache order, each with its prefix's hash."""
    pieces = _openai_pieces(body) if api == "openai" else _anthropic_pieces(body)
    chain = hashlib.sha256(f"{api}:{body.get('model', '')}".encode())
    out = []
    for item, text, breakpoint in pieces:
        blocks = _blocks(chain.hexdigest(), text)
        chain.update(json.dumps(item, sort_keys=True, default=str).encode())
        out.append(Segment(tokens_of(text), chain.copy().hexdigest(), breakpoint, blocks))
    return out


def _blocks(before: str, text: str) -> tuple[str, ...]:
    """The hashes of the prefixes ending inside a segment's text, a block apart."""
    step = BLOCK_TOKENS * CHARS_PER_TOKEN
    running = hashlib.sha256(f"{before}\0".encode())
    out = []
    for start in range(0, len(text) - step, step):
        running.update(text[start : start + step].encode())
        out.append(running.copy().hexdigest())
    return tuple(out)


def prompt_tokens(api: Api, body: Mapping[str, Any]) -> int:
    """What the request's prompt weighs, in tokens."""
    return sum(s.tokens for s in segments(api, body))


def _keyed(part: Segment, key: str) -> Segment:
    """The segment as the cache of one API key knows it."""
    if not key:
        return part

    def keyed(digest: str) -> str:
        return hashlib.sha256(f"{key}\0{digest}".encode()).hexdigest()

    blocks = tuple(keyed(b) for b in part.blocks)
    return Segment(part.tokens, keyed(part.prefix_hash), part.breakpoint, blocks)


@dataclass(frozen=True)
class Lookup:
    """What the cache served a prompt as its request came in, and the prefixes the request
    leaves behind once its answer begins."""

    use: CacheUse
    kept: tuple[str, ...]


class PromptCache:
    """The prefixes a server has seen, per vendor's rules; thread-safe.

    A request is served what was kept when it came in, and what it leaves is kept once its
    answer begins (`keep`), as the vendors' caches work: a prefix is written as the prompt
    is read, so requests sent at once each pay for it. `serve` does both at once.
    """

    def __init__(self, min_tokens: int = DEFAULT_MIN_CACHED_TOKENS) -> None:
        self.min_tokens = min_tokens
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def serve(self, api: Api, body: Mapping[str, Any], key: str = "") -> CacheUse:
        """What the cache serves this prompt (made with API key `key`), then remember what
        it leaves behind."""
        found = self.look(api, body, key)
        self.keep(found)
        return found.use

    def look(self, api: Api, body: Mapping[str, Any], key: str = "") -> Lookup:
        """What the cache serves this prompt now (made with API key `key`), and what the
        request will leave behind."""
        parts = [_keyed(part, key) for part in segments(api, body)]
        ends = []
        total = 0
        for part in parts:
            total += part.tokens
            ends.append(total)
        with self._lock:
            if api == "openai":
                return self._automatic(parts, ends, total)
            return self._at_breakpoints(parts, ends, total)

    def keep(self, found: Lookup) -> None:
        """Remember the prefixes a request leaves behind (its answer has begun)."""
        with self._lock:
            self._seen.update(found.kept)

    def _automatic(self, parts: list[Segment], ends: list[int], total: int) -> Lookup:
        """OpenAI: the longest prefix seen before, whole segments, then the BLOCK_TOKENS
        blocks of the first segment that differs; every prefix of this one is kept."""
        read = start = 0
        for part, end in zip(parts, ends, strict=True):
            if part.prefix_hash not in self._seen:
                shared = sum(1 for _ in itertools.takewhile(self._seen.__contains__, part.blocks))
                read = max(read, start + shared * BLOCK_TOKENS)
                break
            read, start = end, end
        read = read if read >= self.min_tokens else 0
        kept = tuple(h for p in parts for h in (*p.blocks, p.prefix_hash))
        return Lookup(CacheUse(total, read=read), kept)

    def _at_breakpoints(self, parts: list[Segment], ends: list[int], total: int) -> Lookup:
        """Anthropic: read the longest prefix written before at or shortly before a
        breakpoint; write the prefix up to every breakpoint."""
        marks = [i for i, p in enumerate(parts) if p.breakpoint]
        read = 0
        for mark in marks:
            for i in range(mark, max(-1, mark - LOOKBACK_BLOCKS - 1), -1):
                if parts[i].prefix_hash in self._seen:
                    read = max(read, ends[i])
                    break
        cacheable = [m for m in marks if ends[m] >= self.min_tokens]
        written = 0
        if cacheable and ends[cacheable[-1]] > read:
            written = ends[cacheable[-1]] - read
        kept = tuple(parts[m].prefix_hash for m in cacheable)
        return Lookup(CacheUse(total, read=read, written=written), kept)

    def clear(self) -> None:
        """Forget every prefix."""
        with self._lock:
            self._seen.clear()
