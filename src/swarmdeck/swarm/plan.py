"""The swarm's plan: `[{role, task, mode, model?, agent?, depends_on?}]`, validated against its
schema and the swarm's context, then cut to `max_members` and routed to a model per member.

A validation error is one sentence naming the plan path that failed
(`plan[1].depends_on[0]: ...`): the coordinator shows it to the model, which corrects the
plan as a worker corrects a result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swarmdeck.swarm.routing import Routing, route
from swarmdeck.swarm.team import MEMBER_MODES, ROLE_PATTERN, Team, first_problem


class PlanMember(BaseModel):
    """One member of a plan, as the model or a plan file gives it (extra keys ignored)."""

    model_config = ConfigDict(extra="ignore")

    role: str = Field(pattern=ROLE_PATTERN, description="A short role label, unique in the plan.")
    task: str = Field(min_length=1, description="A self-contained task for this member.")
    mode: Literal["code", "explore", "test", "review"] | None = Field(
        None, description="code (writes, in its own worktree), explore, test or review."
    )
    model: str | None = Field(None, description="provider:model; routed when omitted.")
    agent: str | None = Field(None, description="A named agent whose prompt and tools to use.")
    depends_on: list[str] = Field(
        default_factory=list, description="Roles that must finish before this one starts."
    )


class SubmitPlanArgs(BaseModel):
    """The plan, as the coordinator's model submits it."""

    members: list[PlanMember] = Field(description="The members, in the order they matter most.")


@dataclass(frozen=True)
class AgentInfo:
    """What planning needs to know of a named agent."""

    system: bool
    model: str | None


@dataclass
class PlanContext:
    """What a plan is checked against; built once per swarm (the same on every replay)."""

    team: Team | None
    max_members: int
    routing: Routing
    # Why code members cannot work here (no clean git repository), or None.
    code_refusal: str | None
    # `provider:model` or `provider` -> the exact `provider:model`; raises when unknown.
    normalize: Callable[[str], str]
    available: set[str]
    agents: dict[str, AgentInfo] = field(default_factory=dict)


class PlanError(ValueError):
    """A plan that does not validate; the message is one sentence naming the path."""


def members_of(raw: Any) -> list[Any]:
    """The member list of a submission: a list, or an object with `members`."""
    if isinstance(raw, dict) and "members" in raw:
        raw = raw["members"]
    if not isinstance(raw, list):
        raise PlanError(f"plan: must be a list of members, got {type(raw).__name__}")
    if not raw:
        raise PlanError("plan: has no members; give at least one")
    return raw


def parse_members(raw: Any, team: Team | None) -> list[PlanMember]:
    """Schema check of every member, modes filled in from the team's roles."""
    members: list[PlanMember] = []
    for i, item in enumerate(members_of(raw)):
        if not isinstance(item, dict):
            raise PlanError(f"plan[{i}]: must be an object, got {type(item).__name__}")
        try:
            member = PlanMember.model_validate(item)
        except ValidationError as exc:
            raise PlanError(f"plan[{i}].{first_problem(exc)}") from None
        if member.mode is None:
            default = team.role(member.role) if team else None
            if default is None or default.mode is None:
                raise PlanError(
                    f"plan[{i}].mode: required field is missing (one of {', '.join(MEMBER_MODES)})"
                )
            member.mode = default.mode
        members.append(member)
    _check_roles(members)
    return members


def _check_roles(members: list[PlanMember]) -> None:
    roles = [m.role for m in members]
    for i, role in enumerate(roles):
        if role in roles[:i]:
            raise PlanError(
                f"plan[{i}].role: {role!r} appears twice; give each member its own role "
                f"(e.g. {role}-2)"
            )
    for i, member in enumerate(members):
        for j, dep in enumerate(member.depends_on):
            if dep == member.role:
                raise PlanError(f"plan[{i}].depends_on[{j}]: a member cannot depend on itself")
            if dep not in roles:
                raise PlanError(
                    f"plan[{i}].depends_on[{j}]: {dep!r} is not a role of this plan "
                    f"(roles: {', '.join(roles)})"
                )
    _check_acyclic(members)


def _check_acyclic(members: list[PlanMember]) -> None:
    deps = {m.role: m.depends_on for m in members}
    state: dict[str, int] = {}

    def visit(role: str, path: list[str]) -> None:
        if state.get(role) == 2:
            return
        if state.get(role) == 1:
            cycle = " -> ".join([*path[path.index(role) :], role])
            index = next(i for i, m in enumerate(members) if m.role == role)
            raise PlanError(f"plan[{index}].depends_on: a cycle: {cycle}")
        state[role] = 1
        for dep in deps[role]:
            visit(dep, [*path, role])
        state[role] = 2

    for member in members:
        visit(member.role, [])


def cut(members: list[PlanMember], limit: int) -> tuple[list[PlanMember], list[dict[str, Any]]]:
    """The first `limit` members, without those that depend on one cut; and what was
    dropped, each with why."""
    kept: list[PlanMember] = []
    dropped: list[dict[str, Any]] = []
    for member in members:
        gone = {d["role"] for d in dropped}
        lost = [dep for dep in member.depends_on if dep in gone]
        if lost:
            why = f"it depends on {', '.join(lost)}, which was dropped"
        elif len(kept) >= limit:
            why = f"over the limit of {limit} members (max_members)"
        else:
            kept.append(member)
            continue
        dropped.append({"role": member.role, "task": member.task, "reason": why})
    return kept, dropped


def accept(raw: Any, ctx: PlanContext, source: str) -> dict[str, Any]:
    """The accepted plan: members routed and completed from the team; PlanError if not.

    {members: [{index, role, task, mode, model, model_from, agent, depends_on,
    system_prompt, tools, timeout}], dropped: [{role, task, reason}], source}
    """
    members = parse_members(raw, ctx.team)
    for i, member in enumerate(members):
        _check_member(i, member, ctx)
    kept, dropped = cut(members, ctx.max_members)
    routed = []
    for index, member in enumerate(kept):
        position = members.index(member)
        team_role = ctx.team.role(member.role) if ctx.team else None
        agent_name = member.agent or (team_role.agent if team_role else None)
        agent = ctx.agents.get(agent_name) if agent_name else None
        wanted, model_from = route(
            member.role,
            member.model,
            team_role.model if team_role else None,
            agent.model if agent else None,
            ctx.routing,
        )
        try:
            model = ctx.normalize(wanted)
        except Exception:
            model = wanted
        if model not in ctx.available:
            where = f"plan[{position}].model" if model_from == "plan" else f"plan[{position}]"
            listed = ", ".join(sorted(ctx.available)) or "none (no provider is ready)"
            raise PlanError(
                f"{where}: model {wanted!r} (from {model_from}) is not available; "
                f"name one of: {listed}"
            )
        routed.append(
            {
                "index": index,
                "role": member.role,
                "task": member.task,
                "mode": member.mode,
                "model": model,
                "model_from": model_from,
                "agent": agent_name,
                "depends_on": list(member.depends_on),
                "system_prompt": team_role.system_prompt if team_role else "",
                "tools": team_role.tools if team_role else None,
                "timeout": team_role.timeout if team_role else None,
            }
        )
    return {"members": routed, "dropped": dropped, "source": source}


def _check_member(i: int, member: PlanMember, ctx: PlanContext) -> None:
    if member.mode == "code" and ctx.code_refusal:
        raise PlanError(
            f"plan[{i}].mode: code members need a clean git repository, and {ctx.code_refusal}; "
            "use explore, test or review"
        )
    name = member.agent
    if name is not None:
        agent = ctx.agents.get(name)
        if agent is None:
            known = ", ".join(sorted(n for n, a in ctx.agents.items() if not a.system)) or "none"
            raise PlanError(f"plan[{i}].agent: no agent named {name!r} (known: {known})")
        if agent.system:
            raise PlanError(f"plan[{i}].agent: {name} is a system agent and never a member")
