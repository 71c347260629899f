"""Scripts for the fake LLM: what it answers, as a pure function of the request."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swarmdeck.errors import SwarmdeckError

# The request and reply types live apart from the script (request.py reads the wire formats,
# reply.py is what the server answers with); they are imported from here by users' tests.
from swarmdeck.testing.reply import (
    Fault,
    FaultCounter,
    Reply,
    ReplyToolCall,
    ReplyUsage,
    break_json,
    effective_usage,
)
from swarmdeck.testing.request import Api, FakeRequest, conversation_key

__all__ = [
    "EXHAUSTED_TEXT",
    "TOOL_RESULT_PLACEHOLDER_CHARS",
    "Api",
    "FakeRequest",
    "Fault",
    "FaultCounter",
    "FaultSpec",
    "NoScenarioMatches",
    "OverflowStyle",
    "Reply",
    "ReplyToolCall",
    "ReplyUsage",
    "ScenarioSpec",
    "Script",
    "ScriptError",
    "ScriptFile",
    "ScriptFn",
    "ScriptSource",
    "ToolCallSpec",
    "TurnSpec",
    "UsageSpec",
    "as_script_fn",
    "break_json",
    "conversation_key",
    "effective_usage",
    "render_placeholders",
]

EXHAUSTED_TEXT = "(script exhausted)"
# Long tool outputs would make scripted answers unreadable; the placeholder keeps a prefix.
TOOL_RESULT_PLACEHOLDER_CHARS = 2000


class ScriptError(SwarmdeckError, ValueError):
    """A script file or dict that does not describe a valid script; the message is one line
    naming the file (when there is one) and the first problem."""


class NoScenarioMatches(LookupError):
    """No scenario of the script applies to the request."""


# --- the script file, validated with pydantic at the edge -------------------------------


class _Strict(BaseModel):
    # Typos in a hand-written script must fail loudly, not be ignored.
    model_config = ConfigDict(extra="forbid")


class UsageSpec(_Strict):
    """Token counts a turn reports; unset input/output are derived from text lengths."""

    input: int | None = Field(default=None, ge=0)
    output: int | None = Field(default=None, ge=0)
    reasoning: int | None = Field(default=None, ge=0)
    cache_read: int | None = Field(default=None, ge=0)
    cache_write: int | None = Field(default=None, ge=0)


class FaultSpec(_Strict):
    """A failure injected instead of (or into) a turn's answer.

    Besides errors and cut streams, the ways real servers misbehave: `ignore_stream`
    answers a streamed request with the whole JSON body; `empty_stream` answers 200 with
    an event stream that holds nothing (llama.cpp, given a prompt over its window);
    `omit_usage` streams no token counts (llama.cpp, always); `hang_up` closes the
    connection without a byte of answer (aimock's `truncateAfterChunks`, whose 200 and
    first chunks are still corked when it destroys the socket).
    """

    # Mirrors reply.Fault on purpose: this is the validated pydantic edge of that dataclass.
    status: int | None = Field(default=None, ge=400, le=599)
    retry_after: float | None = Field(default=None, ge=0)
    times: int | None = Field(default=None, ge=0)
    body: dict[str, Any] | None = None
    cut_stream: bool = False
    malformed_arguments: bool = False
    ignore_stream: bool = False
    empty_stream: bool = False
    omit_usage: bool = False
    hang_up: bool = False


class ToolCallSpec(_Strict):
    """One tool call of a scripted turn; object arguments are serialised to JSON."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class TurnSpec(_Strict):
    """One assistant answer of a scenario."""

    text: str = ""
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    reasoning: str | None = None
    usage: UsageSpec | None = None
    # A search with the request's tool search tool (Anthropic's), before the text and calls.
    tool_search: str | None = Field(default=None, min_length=1)
    delay: float = Field(default=0.0, ge=0)
    # Seconds between the events of a streamed answer (a slow model writing).
    chunk_delay: float = Field(default=0.0, ge=0)
    fault: FaultSpec | None = None


class ScenarioSpec(_Strict):
    """A conversation script, chosen by a substring of the first user message."""

    match: str | None = None
    turns: list[TurnSpec] = Field(default_factory=list)


OverflowStyle = Literal["vendor", "vllm", "llamacpp", "empty_stream"]


class ScriptFile(_Strict):
    """The whole script file; `context_tokens` gives the model a window, and `overflow` says
    how a prompt over it is refused: the vendor's own 400 (OpenAI's
    `context_length_exceeded`, Anthropic's `prompt is too long`), vLLM's or llama.cpp's
    400, or llama.cpp's 200 with an empty stream."""

    scenarios: list[ScenarioSpec] = Field(default_factory=list)
    context_tokens: int | None = Field(default=None, gt=0)
    overflow: OverflowStyle = "vendor"


# --- choosing a reply ----------------------------------------------------------------------


def render_placeholders(text: str, request: FakeRequest) -> str:
    """Fill {{last_tool_result}}, {{turn}} and {{task}} from the request."""
    return (
        text.replace(
            "{{last_tool_result}}", request.last_tool_result[:TOOL_RESULT_PLACEHOLDER_CHARS]
        )
        .replace("{{turn}}", str(request.turn))
        .replace("{{task}}", request.task)
    )


def _render_value(value: Any, request: FakeRequest) -> Any:
    """Fill placeholders in the string leaves of object arguments (the JSON stays valid)."""
    if isinstance(value, str):
        return render_placeholders(value, request)
    if isinstance(value, dict):
        return {k: _render_value(v, request) for k, v in value.items()}
    if isinstance(value, list):
        return [_render_value(v, request) for v in value]
    return value


def _fault_from_spec(spec: FaultSpec | None) -> Fault | None:
    """Plain copy of a fault spec."""
    if spec is None:
        return None
    return Fault(**spec.model_dump())


def _usage_from_spec(spec: UsageSpec | None) -> ReplyUsage | None:
    """Plain copy of a usage spec."""
    if spec is None:
        return None
    return ReplyUsage(**spec.model_dump())


def _reply_from_turn(turn: TurnSpec, request: FakeRequest) -> Reply:
    """A scripted turn with its placeholders filled."""
    calls = tuple(
        ReplyToolCall(
            name=c.name,
            # Raw string arguments are promised to go out as is.
            arguments=c.arguments
            if isinstance(c.arguments, str)
            else _render_value(c.arguments, request),
        )
        for c in turn.tool_calls
    )
    return Reply(
        text=render_placeholders(turn.text, request),
        tool_calls=calls,
        reasoning=None if turn.reasoning is None else render_placeholders(turn.reasoning, request),
        usage=_usage_from_spec(turn.usage),
        tool_search=None
        if turn.tool_search is None
        else render_placeholders(turn.tool_search, request),
        delay=turn.delay,
        chunk_delay=turn.chunk_delay,
        fault=_fault_from_spec(turn.fault),
    )


def _first_problem(exc: ValidationError) -> str:
    """The first validation error as `where: what`, and how many more there are."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "the script"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _syntax(exc: Exception) -> str:
    """What is wrong with a file that does not parse, in one line with its position."""
    if isinstance(exc, json.JSONDecodeError):
        return f"JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
    return f"YAML: {problem}{where}"


class Script:
    """A validated script: scenarios of turns, chosen by the first user message."""

    def __init__(self, spec: ScriptFile | None = None) -> None:
        self.spec = spec or ScriptFile()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "fake LLM script") -> Script:
        """Validate a script given as a dict (the parsed YAML/JSON file)."""
        try:
            return cls(ScriptFile.model_validate(data))
        except ValidationError as exc:
            raise ScriptError(f"invalid {source}: {_first_problem(exc)}") from exc

    @classmethod
    def load(cls, path: Path | str) -> Script:
        """Load a YAML or JSON script file (by suffix; YAML otherwise)."""
        path = Path(path)
        hint = "see `swarmdeck fake-llm --help` for the format"
        try:
            raw = path.read_text(encoding="utf-8")
            data = json.loads(raw) if path.suffix.lower() == ".json" else yaml.safe_load(raw)
        except OSError as exc:
            raise ScriptError(f"cannot read fake LLM script {path}: {exc.strerror}") from exc
        except (ValueError, yaml.YAMLError) as exc:
            raise ScriptError(f"fake LLM script {path} is not valid {_syntax(exc)}", hint) from exc
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ScriptError(f"fake LLM script {path} must be a mapping with 'scenarios'", hint)
        try:
            return cls.from_dict(data, f"fake LLM script {path}")
        except ScriptError as exc:
            raise ScriptError(exc.message, hint) from exc.__cause__

    def scenario_for(self, request: FakeRequest) -> ScenarioSpec:
        """First scenario whose match is in the task, else the last one without match."""
        for scenario in self.spec.scenarios:
            if scenario.match is not None and scenario.match in request.task:
                return scenario
        fallbacks = [s for s in self.spec.scenarios if s.match is None]
        if fallbacks:
            return fallbacks[-1]
        raise NoScenarioMatches(
            f"no scenario matches the first user message {request.task[:200]!r}"
        )

    def reply_for(self, request: FakeRequest) -> Reply:
        """The reply for this request; past the last turn, "(script exhausted)"."""
        scenario = self.scenario_for(request)
        if request.turn >= len(scenario.turns):
            return Reply(text=EXHAUSTED_TEXT)
        return _reply_from_turn(scenario.turns[request.turn], request)

    def __call__(self, request: FakeRequest) -> Reply:
        """Scripts and plain callables are used the same way by the server."""
        return self.reply_for(request)


ScriptFn = Callable[[FakeRequest], Reply]
ScriptSource = (
    Script | ScriptFile | Mapping[str, Any] | Path | str | Callable[[FakeRequest], Reply] | None
)


def as_script_fn(source: ScriptSource) -> ScriptFn:
    """Turn whatever `set_script` accepts into a request -> reply function; str is a path."""
    if source is None:
        return Script()
    if isinstance(source, Script):
        return source
    if isinstance(source, ScriptFile):
        return Script(source)
    if isinstance(source, Mapping):
        return Script.from_dict(source)
    if isinstance(source, Path | str):
        return Script.load(source)
    if callable(source):
        return source
    raise TypeError(f"cannot use {type(source).__name__} as a fake LLM script")
