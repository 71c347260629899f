"""The tool protocol: a schema, an effect class, the modes that may use it, and an async body."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from swarmdeck.errors import PermissionDeniedError, ToolError
from swarmdeck.models.types import ToolSpec
from swarmdeck.tools.lean_schema import lean_schema


class Effect(StrEnum):
    """What running a tool again after a crash would do."""

    READ = "read"  # safe to run again
    IDEMPOTENT = "idempotent"  # runs again with the same key and the same outcome
    ONCE = "once"  # never run again automatically; the model is told it was interrupted


ALL_MODES = frozenset({"code", "explore", "test", "review", "resume", "agent"})
WRITE_MODES = frozenset({"code", "resume", "agent"})
READ_ONLY_MODES = frozenset({"explore", "test", "review"})


@dataclass
class ToolContext:
    """What a tool may know about the run it serves."""

    session_id: str
    workdir: Path
    mode: str
    # The run's own directory: HOME, XDG dirs and tmp for tool processes live below it.
    run_dir: Path
    # Extra services the runtime hands tools (artifact store, etc.), by name.
    services: dict[str, Any] = field(default_factory=dict)
    # A stable key per call, so idempotent tools can deduplicate their effect.
    call_key: str = ""
    # What started the turn that made this call: "person", "parent", "child", "cron",
    # "system" (see runtime/origin.py). Guards of fleet-changing tools read it.
    origin: str = ""

    @property
    def read_only(self) -> bool:
        """True in modes that must not change the workdir."""
        return self.mode in READ_ONLY_MODES


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call returned, as the model and the verdict see it."""

    content: str
    is_error: bool = False
    permission_denied: bool = False
    # A check tool run before a cron wakes the model found nothing to do: no model call.
    quiet: bool = False


# A body returns the text the model sees, or a whole outcome (a check's `quiet`).
ToolBody = Callable[[ToolContext, Any], Awaitable["str | ToolOutcome"]]


@functools.lru_cache(maxsize=1024)
def _spec_of(name: str, description: str, args_model: type[BaseModel]) -> ToolSpec:
    return ToolSpec(name, description, lean_schema(args_model.model_json_schema()))


@dataclass(frozen=True)
class Tool:
    """A tool the model can call."""

    name: str
    description: str
    args_model: type[BaseModel]
    effect: Effect
    body: ToolBody
    modes: frozenset[str] = ALL_MODES
    # Control tools (wait, spawn_agent, ask_user, submit_result...) are carried out by the
    # session workflow itself, not as a plain step.
    control: bool = False
    # Whether a mode is offered the tool on this host right now (the shell needs a sandbox
    # in read-only modes); None: whenever the mode may use it.
    offered: Callable[[str], bool] | None = None
    # Offered only to sessions that name it (an agent's tools, a loaded skill's tools.json),
    # never by default: the store-wide maintenance tools.
    granted: bool = False
    # The JSON schema the model is shown, when it comes from elsewhere (an MCP server's
    # inputSchema); the server validates the arguments, `args_model` only keeps them.
    schema: dict[str, Any] | None = None
    # Shown whole from the first turn even when tools load on demand (an MCP server marked
    # `eager`); else a tool outside the core set is indexed until loaded (tools/tool_index).
    eager: bool = False
    # What the tool belongs to (its MCP server): the index gives a group one line.
    group: str | None = None

    def offered_to(self, mode: str) -> bool:
        """True when a session in `mode` is shown this tool here."""
        return mode in self.modes and (self.offered is None or self.offered(mode))

    def spec(self) -> ToolSpec:
        """The schema the model is shown (built once: pydantic builds it anew each time)."""
        if self.schema is not None:
            return ToolSpec(self.name, self.description, self.schema)
        return _spec_of(self.name, self.description, self.args_model)

    def parse_args(self, raw: str) -> BaseModel:
        """Validate the model's JSON arguments; raise ToolError with a message it can act on."""
        try:
            data = json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            raise ToolError(f"arguments are not valid JSON ({exc.msg} at char {exc.pos})") from exc
        if not isinstance(data, dict):
            raise ToolError("arguments must be a JSON object")
        try:
            return self.args_model.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "arguments"
            raise ToolError(f"invalid arguments: {where}: {first['msg']}") from exc

    async def call(self, ctx: ToolContext, raw_args: str) -> ToolOutcome:
        """Validate, enforce the mode, run; turn our own errors into an outcome the model sees."""
        if ctx.mode not in self.modes:
            return ToolOutcome(
                f"permission denied: {self.name} is not available in {ctx.mode} mode",
                is_error=True,
                permission_denied=True,
            )
        try:
            args = self.parse_args(raw_args)
            result = await self.body(ctx, args)
            return result if isinstance(result, ToolOutcome) else ToolOutcome(result)
        except PermissionDeniedError as exc:
            return ToolOutcome(f"permission denied: {exc.message}", True, True)
        except ToolError as exc:
            return ToolOutcome(f"error: {exc.message}", is_error=True)


class ToolRegistry:
    """Tools by name, filtered by mode."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools or []:
            self.add(t)

    def add(self, tool: Tool) -> None:
        """Register a tool; a second tool with the same name replaces the first."""
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """The tool of that name, or None."""
        return self._tools.get(name)

    def for_mode(self, mode: str, only: list[str] | None = None) -> list[Tool]:
        """The tools a session in `mode` is offered, optionally narrowed to `only` (without
        `only`, the granted-only tools are left out)."""
        tools = [t for t in self._tools.values() if t.offered_to(mode)]
        if only is not None:
            return [t for t in tools if t.name in only]
        return [t for t in tools if not t.granted]

    def names(self) -> list[str]:
        """Every registered tool's name."""
        return list(self._tools)


def control_tool(
    name: str,
    description: str,
    args_model: type[BaseModel],
    carried_out_by: str,
    modes: frozenset[str] = ALL_MODES,
) -> Tool:
    """A control tool whose call `carried_out_by` (the session workflow, the swarm's
    coordinator) checks and carries out itself: its body is never called."""

    async def never_called(_ctx: ToolContext, _args: Any) -> str:
        raise AssertionError(f"{name} is carried out by {carried_out_by}")

    return Tool(name, description, args_model, Effect.IDEMPOTENT, never_called, modes, control=True)
