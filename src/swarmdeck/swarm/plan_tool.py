"""submit_plan: how the coordinator's model hands in its plan (checked by the coordinator)."""

from __future__ import annotations

from typing import Any

from swarmdeck.swarm.plan import SubmitPlanArgs
from swarmdeck.swarm.spec import SWARM_MODE
from swarmdeck.tools.base import Effect, Tool, ToolContext


async def _checked_by_coordinator(_ctx: ToolContext, _args: Any) -> str:
    raise AssertionError("submit_plan is carried out by the swarm's coordinator")


SUBMIT_PLAN_TOOL = Tool(
    name="submit_plan",
    description=(
        "Submit the swarm's plan: its members, each with a role, a self-contained task and "
        "a mode. It is checked; when it is rejected you are told exactly why."
    ),
    args_model=SubmitPlanArgs,
    effect=Effect.IDEMPOTENT,
    body=_checked_by_coordinator,
    modes=frozenset({SWARM_MODE}),
    control=True,
)
