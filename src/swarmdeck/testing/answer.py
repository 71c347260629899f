"""What both wire formats share: a reply resolved for the wire, its stream pieces, and the
error a request gets when it is refused."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from swarmdeck.testing.prompt_cache import CacheUse
from swarmdeck.testing.reply import Reply, ReplyToolCall, ReplyUsage, break_json, effective_usage
from swarmdeck.testing.request import Api, FakeRequest

if TYPE_CHECKING:
    from swarmdeck.testing.tool_search import SearchTurn

# A fixed creation time keeps whole responses deterministic.
CREATED = 1_700_000_000
ARGUMENT_PIECES = 3


class HttpError(Exception):
    """An error answer: status, message, optional vendor body and Retry-After."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body
        self.retry_after = retry_after


# Alike models.types.ToolCall on purpose: the fake stands for the vendor, so it shares no
# type with the client whose parsing it tests.
@dataclass(frozen=True)
class WireCall:
    """A tool call ready for the wire."""

    id: str
    name: str
    arguments: str
    # A call of an OpenAI custom (freeform) tool: `arguments` is its raw input.
    custom: bool = False


@dataclass(frozen=True)
class Answer:
    """A reply resolved for one vendor: ids assigned, usage filled, faults applied."""

    id: str
    model: str
    text: str
    reasoning: str | None
    calls: tuple[WireCall, ...]
    usage: ReplyUsage
    # A search the model ran with the vendor's tool search, before its text and calls.
    search: SearchTurn | None = None
    # Anthropic's server paused the turn (Reply.pause_turn).
    paused: bool = False

    @property
    def input_tokens(self) -> int:
        """Prompt count (always filled by effective_usage)."""
        return self.usage.input or 0

    @property
    def output_tokens(self) -> int:
        """Completion count (always filled by effective_usage)."""
        return self.usage.output or 0


def bad_request(message: str) -> HttpError:
    """A 400 answer."""
    return HttpError(400, message)


def check_common(body: Any) -> list[Mapping[str, Any]]:
    """Checks both vendors share; returns the messages."""
    if not isinstance(body, Mapping):
        raise bad_request("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("missing required field 'model'")
    messages = body.get("messages")
    if messages is None:
        raise bad_request("missing required field 'messages'")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise bad_request(f"messages[{i}] must be an object with a string 'role'")
    if "stream" in body and not isinstance(body["stream"], bool | None):
        raise bad_request("'stream' must be a boolean")
    if body.get("tools") is not None and not isinstance(body["tools"], list):
        raise bad_request("'tools' must be an array")
    return messages


def build_answer(
    api: Api,
    reply: Reply,
    request: FakeRequest,
    *,
    malformed: bool,
    cache: CacheUse | None = None,
    search: SearchTurn | None = None,
) -> Answer:
    """Resolve a reply for the wire: deterministic ids, broken arguments if asked."""
    prefix = "call" if api == "openai" else "toolu"
    custom = custom_tool_names(request.body) if api == "openai" else frozenset()
    calls = tuple(
        WireCall(
            id=f"{prefix}_{request.turn}_{i}",
            name=call.name,
            arguments=break_json(call.arguments_text()) if malformed else call.arguments_text(),
        )
        if call.name not in custom
        else WireCall(f"{prefix}_{request.turn}_{i}", call.name, custom_input(call), custom=True)
        for i, call in enumerate(reply.tool_calls)
    )
    id_prefix = "chatcmpl-" if api == "openai" else "msg_"
    return Answer(
        id=id_prefix + request.conversation_key[:24],
        model=request.model,
        text=reply.text,
        reasoning=reply.reasoning,
        calls=calls,
        usage=effective_usage(reply, request, cache),
        search=search,
        paused=reply.pause_turn,
    )


def custom_tool_names(body: Mapping[str, Any]) -> frozenset[str]:
    """Names of the custom (freeform) tools a request declares: nested under `custom` in
    Chat Completions, flat (`name` beside `type`) in the Responses API."""
    names = set()
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping) or tool.get("type") != "custom":
            continue
        inner = tool.get("custom")
        names.add(str(inner.get("name") if isinstance(inner, Mapping) else tool.get("name")))
    return frozenset(names)


def custom_input(call: ReplyToolCall) -> str:
    """A scripted call's raw input for a custom tool: a string as it is, or the `input` of
    object arguments (as the neutral shape writes them)."""
    if isinstance(call.arguments, str):
        return call.arguments
    return str(call.arguments.get("input", ""))


def words(text: str) -> list[str]:
    """Text split into word-sized stream deltas (with their trailing spaces)."""
    return re.findall(r"\s*\S+\s*|\s+", text)


def thirds(text: str) -> list[str]:
    """Arguments split into a few pieces, so clients must reassemble them."""
    if not text:
        return []
    size = -(-len(text) // ARGUMENT_PIECES)
    return [text[i : i + size] for i in range(0, len(text), size)]


def phrase(status: int) -> str:
    """The reason phrase of a status, also for codes http.HTTPStatus does not know."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"error {status}"
