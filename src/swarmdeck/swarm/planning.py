"""The coordinator's planning steps: the plan it is given or the one its model submits,
checked against the team and accepted once."""

from __future__ import annotations

import json
import re
from typing import Any

from swarmdeck.models.available import normalize
from swarmdeck.runtime.services import Services, services
from swarmdeck.runtime.tool_calls import store_result
from swarmdeck.swarm.phases import OWN_INPUT_KEY, SUBMIT_PLAN, append_entry, stored_in, swarm_spec
from swarmdeck.swarm.plan import AgentInfo, PlanContext, PlanError, accept
from swarmdeck.swarm.spec import SwarmSpec


def plan_context(spec: SwarmSpec, workdir: str, svc: Services) -> PlanContext:
    """What a plan is checked against, from the swarm's spec and this process's providers,
    keys and plugins."""
    plugin_set = svc.plugins_for(workdir, spec.plugins)
    return PlanContext(
        team=spec.team,
        max_members=spec.max_members,
        routing=spec.routing,
        code_refusal=spec.code_refusal,
        normalize=lambda name: normalize(svc.providers, name),
        available={m.name for m in svc.available_models()},
        agents={name: AgentInfo(a.system, a.model) for name, a in plugin_set.agents.items()},
    )


def accept_given_plan(session_id: str) -> dict[str, Any]:
    """The plan the swarm was started with (`--plan FILE`), checked and routed here:
    {plan} or {error}."""
    svc = services()
    record = svc.session_identity(session_id)
    stored = stored_in(svc.catalog, session_id, "swarm:plan")
    if stored is not None:
        return {"plan": stored}
    spec = swarm_spec(record)
    try:
        plan = accept(spec.plan, plan_context(spec, record.workdir, svc), "file")
    except PlanError as exc:
        return {"error": str(exc)}
    return {"plan": append_entry(session_id, "swarm:plan", {"phase": "plan", **plan})}


def _after_rejection(tries_left: int) -> str:
    if tries_left <= 0:
        return "That was the last try: the swarm ends without a plan."
    tries = "1 try" if tries_left == 1 else f"{tries_left} tries"
    return f"Fix it and call submit_plan again ({tries} left)."


def _plan_in_text(text: str) -> Any:
    """A plan written as JSON in the answer's text instead of a submit_plan call, or None."""
    fenced = re.findall(r"```(?:json)?\s*(.*?)```", text, flags=re.DOTALL)
    for candidate in [*fenced, text]:
        candidate = candidate.strip()
        if candidate[:1] in "[{":
            try:
                return json.loads(candidate)
            except json.JSONDecodeError:
                continue
    return None


def check_plan_turn(
    session_id: str, turn: int, reply: dict[str, Any], tries_left: int
) -> dict[str, Any]:
    """Check the plan a decompose turn submitted: {plan} when accepted (stored as
    `swarm:plan`), else {error}. Every call of the turn gets its answer in the transcript,
    and a turn without a plan gets a message saying so, so the next turn knows what to fix.
    """
    svc = services()
    stored = stored_in(svc.catalog, session_id, "swarm:plan")
    if stored is not None:
        return {"plan": stored, "error": None}
    record = svc.session_identity(session_id)
    spec = swarm_spec(record)
    ctx = plan_context(spec, record.workdir, svc)
    plan: dict[str, Any] | None = None
    error: str | None = None
    submissions = 0
    for call in reply["tool_calls"]:
        if call["name"] != SUBMIT_PLAN:
            content = (
                f"error: the coordinator has one tool, {SUBMIT_PLAN}; {call['name']} is not it"
            )
            store_result(session_id, turn, call, content, True)
            continue
        submissions += 1
        if plan is not None:
            store_result(session_id, turn, call, "ignored: a plan was accepted already", False)
            continue
        plan, error = _check(call["arguments"], ctx)
        if plan is None:
            content = f"error: plan rejected: {error}. {_after_rejection(tries_left)}"
            store_result(session_id, turn, call, content, True)
        else:
            store_result(session_id, turn, call, _accepted_note(plan), False)
    if not submissions:
        raw = _plan_in_text(reply.get("text") or "")
        if raw is None:
            error = "the answer held no plan"
            note = f'Your answer held no plan: call {SUBMIT_PLAN} with {{"members": [...]}}.'
        else:
            plan, error = _check(json.dumps(raw), ctx)
            note = (
                f"Your plan was rejected: {error}. {_after_rejection(tries_left)}"
                if plan is None
                else ""
            )
        if note and tries_left > 0:
            key = f"{OWN_INPUT_KEY}plan-check:{turn}"
            svc.catalog.append_event(session_id, key, "user", {"text": note})
    if plan is None:
        return {"plan": None, "error": error}
    return {
        "plan": append_entry(session_id, "swarm:plan", {"phase": "plan", **plan}),
        "error": None,
    }


def _check(arguments: str, ctx: PlanContext) -> tuple[dict[str, Any] | None, str | None]:
    try:
        raw = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        return None, f"plan: the arguments are not valid JSON ({exc.msg})"
    try:
        return accept(raw, ctx, "model"), None
    except PlanError as exc:
        return None, str(exc)


def _accepted_note(plan: dict[str, Any]) -> str:
    roles = ", ".join(f"{m['role']} ({m['mode']}, {m['model']})" for m in plan["members"])
    note = f"plan accepted: {len(plan['members'])} member(s): {roles}"
    for d in plan["dropped"]:
        note += f"\ndropped {d['role']}: {d['reason']}"
    return note
