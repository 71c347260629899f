"""Token estimates for calls whose provider reports no usage (llama.cpp's streams, for one).

The rule is deliberately simple: a token per four characters of text, the usual figure
for English prose and code under BPE tokenizers, rounded up. Callers go through these
functions only, so a real tokenizer (tiktoken) can take the rule's place without them
changing. Counts made this way are marked `estimated` wherever they are stored or shown.
"""

from __future__ import annotations

import json

from swarmdeck.models.types import Completion, Message, ToolSpec, Usage

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Tokens in a text, by the rule above."""
    return -(-len(text) // CHARS_PER_TOKEN)


def prompt_tokens(messages: list[Message], tools: list[ToolSpec]) -> int:
    """Tokens of what a request sends: every message's text, tool calls and reasoning,
    and the tools' names, descriptions and schemas."""
    parts: list[str] = []
    for message in messages:
        parts.append(message.content)
        parts.append(message.reasoning or "")
        parts.extend(call.name + call.arguments for call in message.tool_calls)
    for tool in tools:
        parts.append(tool.name + tool.description + json.dumps(tool.parameters))
    return estimate_tokens("".join(parts))


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
