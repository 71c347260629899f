"""submit_plan: how the coordinator's model hands in its plan (checked by the coordinator)."""

from __future__ import annotations

from swarmdeck.swarm.plan import SubmitPlanArgs
from swarmdeck.swarm.spec import SWARM_MODE
from swarmdeck.tools.base import control_tool

SUBMIT_PLAN_TOOL = control_tool(
    "submit_plan",
    "Submit the swarm's plan: its members, each with a role, a self-contained task and "
    "a mode. It is checked; when it is rejected you are told exactly why.",
    SubmitPlanArgs,
    carried_out_by="the swarm's coordinator",
    modes=frozenset({SWARM_MODE}),
)
