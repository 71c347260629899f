"""Control tools: their schemas live here; the session workflow carries them out itself,
because they wait, spawn workflows or change the session's state durably."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from swarmdeck.tools.base import ALL_MODES, Effect, Tool, ToolContext


async def _carried_out_by_workflow(_ctx: ToolContext, _args: Any) -> str:
    raise AssertionError("control tools are carried out by the session workflow")


def _control(name: str, description: str, args: type[BaseModel], effect: Effect) -> Tool:
    return Tool(
        name=name,
        description=description,
        args_model=args,
        effect=effect,
        body=_carried_out_by_workflow,
        modes=ALL_MODES,
        control=True,
    )


class WaitArgs(BaseModel):
    """Sleep durably."""

    seconds: float = Field(gt=0, le=30 * 86400, description="How long to wait.")
    reason: str = Field("", description="Why, for the transcript.")


class CronArgs(BaseModel):
    """Wake up every `seconds` until cancelled."""

    seconds: float = Field(gt=0, le=30 * 86400, description="Interval between wake-ups.")
    reason: str = Field("", description="What each wake-up is for.")
    check: str | None = Field(
        None,
        description="A tool of yours run at each tick before you are woken; when it finds "
        "nothing to do you are not woken at all (ticks cost nothing).",
    )
    check_args: dict[str, Any] = Field(default_factory=dict, description="The check's arguments.")


class NoArgs(BaseModel):
    """No arguments."""


class SpawnArgs(BaseModel):
    """Start a sub-agent."""

    task: str | None = Field(None, description="The sub-agent's task.")
    agent_name: str | None = Field(None, description="A named agent from an .agent.md file.")
    model: str | None = Field(
        None, description="provider:model as list_available_models names it; default: yours"
    )
    system_message: str | None = Field(None, description="Its system prompt.")
    tool_names: list[str] | None = Field(None, description="Only these tools.")
    title: str | None = Field(None, description="A short title.")


class MessageArgs(BaseModel):
    """Send a message to a sub-agent."""

    agent_id: str
    text: str


class WaitAgentsArgs(BaseModel):
    """Wait until sub-agents finish."""

    ids: list[str] | None = Field(None, description="Which; all live children when omitted.")
    timeout: float = Field(600, gt=0, le=86400, description="Give up after this many seconds.")


class AgentIdArgs(BaseModel):
    """One sub-agent."""

    agent_id: str


class BroadcastArgs(BaseModel):
    """Send a message to every other member of your swarm."""

    text: str = Field(min_length=1, description="The message.")


class AskArgs(BaseModel):
    """Ask the user a question and wait for the answer."""

    question: str


# The tool that starts a sub-agent: a session offered it may head a family.
SPAWN_AGENT = "spawn_agent"

CONTROL_TOOLS: list[Tool] = [
    _control(
        "wait",
        "Sleep durably for some seconds (survives restarts); a person's message ends it early.",
        WaitArgs,
        Effect.READ,
    ),
    _control(
        "cron",
        "Wake up every `seconds` seconds until cancel_cron; end your turn between wake-ups.",
        CronArgs,
        Effect.IDEMPOTENT,
    ),
    _control("cancel_cron", "Stop the recurring wake-ups.", NoArgs, Effect.IDEMPOTENT),
    _control(
        SPAWN_AGENT,
        "Start a sub-agent session on a task (or a named agent); returns its id at once.",
        SpawnArgs,
        Effect.IDEMPOTENT,
    ),
    _control(
        "message_agent", "Send a message to one of your sub-agents.", MessageArgs, Effect.IDEMPOTENT
    ),
    _control("check_agents", "Status and latest output of your sub-agents.", NoArgs, Effect.READ),
    _control(
        "wait_for_agents",
        "Wait until the given sub-agents (default: all) have finished, or the timeout.",
        WaitAgentsArgs,
        Effect.READ,
    ),
    _control(
        "cancel_agent",
        "Cancel a sub-agent and everything it started.",
        AgentIdArgs,
        Effect.IDEMPOTENT,
    ),
    _control("list_sessions", "List the sessions of your tree.", NoArgs, Effect.READ),
    _control("ask_user", "Ask the user a question and wait for the answer.", AskArgs, Effect.READ),
]

# Granted, not in CONTROL_TOOLS: offered to swarm members (who name it), not to every session.
BROADCAST_TOOL = Tool(
    name="broadcast",
    description="Send a message to every other member of your swarm, those that start later "
    "too (lossless, once each).",
    args_model=BroadcastArgs,
    effect=Effect.IDEMPOTENT,
    body=_carried_out_by_workflow,
    modes=ALL_MODES,
    control=True,
    granted=True,
)
