"""Discovery: which named agents a session may spawn, and which models it may name."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from swarmdeck.tools.base import ALL_MODES, Effect, Tool, ToolContext


class NoArgs(BaseModel):
    """No arguments."""


async def _list_agents(ctx: ToolContext, _args: NoArgs) -> str:
    plugin_set = ctx.services.get("plugins")
    agents = sorted(plugin_set.agents.values(), key=lambda a: a.name) if plugin_set else []
    if not agents:
        return "no named agents"
    lines = []
    for a in agents:
        kind = " [system agent: runs by itself, do not spawn]" if a.system else ""
        lines.append(f"- {a.name}: {a.description or a.title or ''}{kind} ({a.tier})")
    return "\n".join(lines)


async def _list_models(ctx: ToolContext, _args: NoArgs) -> str:
    listed: list[Any] = ctx.services["available_models"]()
    if not listed:
        return "no model is ready (no provider has a key)"
    return json.dumps([m.as_dict() for m in listed], ensure_ascii=False)


DISCOVERY_TOOLS = [
    Tool(
        "list_agents",
        "The named agents you can start with spawn_agent(agent_name=...).",
        NoArgs,
        Effect.READ,
        _list_agents,
        modes=ALL_MODES,
    ),
    Tool(
        "list_available_models",
        "The exact provider:model names you may pass to spawn_agent(model=...), with context "
        "size and prices per million tokens where known.",
        NoArgs,
        Effect.READ,
        _list_models,
        modes=ALL_MODES,
    ),
]
