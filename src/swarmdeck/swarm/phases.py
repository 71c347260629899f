"""The coordinator's steps: plain functions the driver runs as durable steps.

Each may run again after a crash (at-least-once), so each writes under an idempotent key in
the coordinator's transcript (kind `swarm`: `swarm:start`, `swarm:plan`,
`swarm:spawn:I:A`, `swarm:end:I:A`, `swarm:result`) and returns what is stored when it
finds it there: a plan is accepted once, a member session is created once, an outcome is
classified once.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.dispatch.modes import get_mode
from swarmdeck.dispatch.settings import load_dispatch_settings
from swarmdeck.dispatch.verdict import RunFacts, build_verdict
from swarmdeck.errors import SwarmdeckError
from swarmdeck.models.available import normalize
from swarmdeck.runtime.agents import agent_session, agent_tools
from swarmdeck.runtime.origin import FROM_PARENT_KEY
from swarmdeck.runtime.services import Services, services
from swarmdeck.runtime.steps import store_result
from swarmdeck.runtime.traced import child_trace_options
from swarmdeck.runtime.tree import broadcasts_of
from swarmdeck.swarm.plan import AgentInfo, PlanContext, PlanError, accept
from swarmdeck.swarm.prompts import member_prompt, member_task
from swarmdeck.swarm.routing import route
from swarmdeck.swarm.spec import SPEC_OPTION, SwarmSpec
from swarmdeck.tools.builtins.memory import MEMORY_TOOL_NAMES
from swarmdeck.workspace.rundir import RunDir

SUBMIT_PLAN = "submit_plan"
SUBMIT_RESULT = "submit_result"
EVENT_KIND = "swarm"
# What every member may use besides its mode's tools: the swarm's messages and blackboard.
SWARM_TOOLS = ("message_agent", "broadcast", *MEMORY_TOOL_NAMES)
# The coordinator's own inputs (a nudge, the aggregate message) come from no person.
OWN_INPUT_KEY = f"{FROM_PARENT_KEY}swarm:"


def _spec(record: SessionRecord) -> SwarmSpec:
    return SwarmSpec.from_options(record.options[SPEC_OPTION])


def _stored(catalog: Any, session_id: str, key: str) -> dict[str, Any] | None:
    event = catalog.event_by_key(session_id, key)
    return event.payload if event is not None else None


def _append(session_id: str, key: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Store a swarm entry once; returns the stored one (the first writer's)."""
    catalog = services().catalog
    if not catalog.append_event(session_id, key, EVENT_KIND, payload):
        stored = _stored(catalog, session_id, key)
        assert stored is not None
        return stored
    return payload


def stored_entry(session_id: str, key: str) -> dict[str, Any] | None:
    """A swarm entry an earlier generation stored (`swarm:plan`, `swarm:result`), or None."""
    return _stored(services().catalog, session_id, key)


def ended_sessions(session_ids: list[str]) -> list[str]:
    """Those of these sessions that have ended."""
    catalog = services().catalog
    return [sid for sid in session_ids if catalog.get_session(sid).terminal]


def mark_start(session_id: str) -> float:
    """When the swarm started (stored once: its timeout counts from there)."""
    return float(_append(session_id, "swarm:start", {"phase": "start", "at": time.time()})["at"])


# -- decompose ------------------------------------------------------------------------------


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
    stored = _stored(svc.catalog, session_id, "swarm:plan")
    if stored is not None:
        return {"plan": stored}
    spec = _spec(record)
    try:
        plan = accept(spec.plan, plan_context(spec, record.workdir, svc), "file")
    except PlanError as exc:
        return {"error": str(exc)}
    return {"plan": _append(session_id, "swarm:plan", {"phase": "plan", **plan})}


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
    stored = _stored(svc.catalog, session_id, "swarm:plan")
    if stored is not None:
        return {"plan": stored, "error": None}
    record = svc.session_identity(session_id)
    spec = _spec(record)
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
    return {"plan": _append(session_id, "swarm:plan", {"phase": "plan", **plan}), "error": None}


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


# -- spawn --------------------------------------------------------------------------------


def member_session_id(coordinator_id: str, index: int, role: str, attempt: int) -> str:
    """A member's session id: readable in `sessions tree`, derived from the plan, so a rerun
    after a crash finds the session it created instead of making a second one."""
    slug = re.sub(r"[^a-z0-9]+", "-", role.lower()).strip("-")[:16] or "member"
    base = f"{coordinator_id}.{index + 1}-{slug}"
    return base if attempt == 0 else f"{base}.r{attempt}"


def _workdir_of(
    svc: Services,
    coordinator: SessionRecord,
    member: dict[str, Any],
    session_id: str,
    dependencies: list[dict[str, Any]],
) -> tuple[str, dict[str, Any] | None]:
    """Where the member works: its own worktree (code), a code dependency's worktree (a
    read-only member that checks its work), or the swarm's workdir."""
    from swarmdeck.workspace.worktrees import create_worktree, save_meta, worktree_of_session

    if member["mode"] == "code":
        trees = svc.settings.worktrees_dir
        tree = worktree_of_session(trees, session_id)
        if tree is None:
            label = session_id.split(".", 1)[1][:32]  # the member's part: 3-coder, 3-coder.r1
            made = create_worktree(Path(coordinator.workdir), trees, label)
            from dataclasses import replace

            tree = replace(made, session_id=session_id)
            save_meta(trees, tree)
        return tree.workdir, {"path": tree.path, "repo": tree.repo, "base": tree.base}
    for dep in dependencies:
        if dep["mode"] == "code" and dep.get("workdir"):
            return dep["workdir"], None
    return coordinator.workdir, None


def _member_tools(member: dict[str, Any], agent_tool_names: list[str] | None) -> list[str]:
    mode_tools = list(get_mode(member["mode"]).tools)
    chosen = agent_tool_names or member.get("tools") or mode_tools
    tools = [t for t in chosen if t != SUBMIT_RESULT]
    return [*tools, SUBMIT_RESULT, *(t for t in SWARM_TOOLS if t not in tools)]


def spawn_member(
    coordinator_id: str,
    member: dict[str, Any],
    attempt: int,
    failed_before: str | None,
    dependencies: list[dict[str, Any]],
    peers: list[list[str]],
) -> dict[str, Any]:
    """Create the member's session for this attempt (once), in its mode, with its prompt,
    tools and workdir; returns the `swarm:spawn` entry ({session_id, workdir, worktree...})."""
    svc = services()
    catalog = svc.catalog
    key = f"swarm:spawn:{member['index']}:{attempt}"
    stored = _stored(catalog, coordinator_id, key)
    if stored is not None:
        return stored
    coordinator = svc.session_identity(coordinator_id)
    spec = _spec(coordinator)
    session_id = member_session_id(coordinator_id, member["index"], member["role"], attempt)
    found = catalog.find_session(session_id)
    worktree = None
    try:
        if found is not None:  # created before a crash: its record says where it works
            workdir = found.workdir
            if member["mode"] == "code":
                _, worktree = _workdir_of(svc, coordinator, member, session_id, dependencies)
        else:
            workdir, worktree = _workdir_of(svc, coordinator, member, session_id, dependencies)
            task = member_task(member, dependencies, failed_before)
            _create_member(svc, coordinator, spec, member, session_id, workdir, task, peers)
    except SwarmdeckError as exc:
        # No worktree could be made (the repository changed since the swarm started): this
        # attempt failed to start, and the recovery policy decides as for any failure.
        failed = _spawn_entry(member, attempt, None, None, None)
        return _append(
            coordinator_id, key, {**failed, "error": f"it could not start: {exc.message}"}
        )
    # What members broadcast before this one existed: it hears it too (after its creation,
    # so a broadcast that listed the members before it is still in its head's inbox).
    for post in broadcasts_of(coordinator_id):
        catalog.post(session_id, post.msg_id, post.kind, post.payload)
    entry = _spawn_entry(member, attempt, session_id, workdir, worktree)
    return _append(coordinator_id, key, entry)


def _spawn_entry(
    member: dict[str, Any],
    attempt: int,
    session_id: str | None,
    workdir: str | None,
    worktree: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "phase": "spawn",
        "index": member["index"],
        "role": member["role"],
        "assigned_role": member.get("assigned_role"),
        "mode": member["mode"],
        "model": member["model"],
        "attempt": attempt,
        "session_id": session_id,
        "workdir": workdir,
        "worktree": worktree,
    }


def _create_member(
    svc: Services,
    coordinator: SessionRecord,
    spec: SwarmSpec,
    member: dict[str, Any],
    session_id: str,
    workdir: str,
    task: str,
    peers: list[list[str]],
) -> None:
    mode = get_mode(member["mode"])
    step_cap = load_dispatch_settings(svc.settings.home).step_caps.get(mode.name) or mode.step_cap
    agent_prompt, agent_tool_names, agent_options = None, None, {}
    if member.get("agent"):
        plugin_set = svc.plugins_for(coordinator.workdir, spec.plugins)
        definition = plugin_set.agent(member["agent"])
        if definition is not None:
            named = agent_session(definition, plugin_set, task, spec.plugins or None)
            agent_prompt = named.system_message
            agent_tool_names = agent_tools(definition)
            # A member is one-shot: an agent's cron would keep it from ever ending.
            agent_options = {
                k: v for k, v in named.options.items() if k not in ("cron", "one_shot")
            }
    others = [tuple(p) for p in peers if p[2] != session_id]
    prompt = member_prompt(member, workdir, step_cap, coordinator.id, others, agent_prompt)
    title_role = member.get("assigned_role") or member["role"]
    first_line = next((ln.strip() for ln in member["task"].splitlines() if ln.strip()), "")
    svc.catalog.create_session(
        session_id=session_id,
        parent_id=coordinator.id,
        root_id=coordinator.root_id,
        depth=coordinator.depth + 1,
        model=member["model"],
        mode=mode.session_mode,
        workdir=workdir,
        run_dir=str(RunDir.create(svc.settings.runs_dir, session_id).path),
        task=task,
        agent=member.get("agent"),
        title=f"{title_role}: {first_line}"[:80],
        system_message=prompt,
        tool_names=_member_tools(member, agent_tool_names),
        options={
            **agent_options,
            "one_shot": True,
            "max_turns": step_cap,
            "result_schema": mode.name,
            "group": coordinator.id,
            "role": member["role"],
            "no_sandbox": spec.no_sandbox,
            **({"plugins": spec.plugins} if spec.plugins else {}),
            # The coordinator's span: the member's spans join the swarm's trace.
            **child_trace_options(),
        },
    )


# -- outcomes -----------------------------------------------------------------------------


def _reason(verdict: Any, record: SessionRecord, why: str | None) -> str | None:
    if verdict.verdict == "completed":
        return None
    parts = [why] if why else []
    if record.error and record.error not in parts:
        parts.append(record.error)
    if verdict.parse_error:
        parts.append(verdict.parse_error)
    return "; ".join(parts) or verdict.reason


def member_outcome(
    coordinator_id: str,
    member: dict[str, Any],
    attempt: int,
    session_id: str,
    timed_out: bool,
    why: str | None,
) -> dict[str, Any]:
    """Classify an ended member session as the contract does (its verdict class and its
    validated result); stored as `swarm:end:I:A`."""
    svc = services()
    catalog = svc.catalog
    key = f"swarm:end:{member['index']}:{attempt}"
    stored = _stored(catalog, coordinator_id, key)
    if stored is not None:
        return stored
    record = catalog.get_session(session_id)
    config, _ = svc.provider_for(record.model)
    facts = RunFacts(
        run_id=session_id,
        session_id=session_id,
        provider=config.key,
        model=record.model,
        mode=member["mode"],
        step_cap=int(record.options.get("max_turns", 0)),
        duration_s=record.updated_at - record.created_at,
        events=catalog.events(session_id),
        usage=catalog.usage_totals([session_id]),
        stored_result=record.result,
        timed_out=timed_out,
        workdir=record.workdir,
    )
    verdict = build_verdict(facts)
    outcome = {
        "phase": "end",
        "index": member["index"],
        "role": member["role"],
        "mode": member["mode"],
        "model": record.model,
        "attempt": attempt,
        "session_id": session_id,
        "verdict": verdict.verdict,
        "result": verdict.result,
        "reason": _reason(verdict, record, why),
        "steps": verdict.steps,
        "timed_out": timed_out,
        "workdir": record.workdir,
        "ended_at": time.time(),
    }
    return _append(coordinator_id, key, outcome)


def skip_member(
    coordinator_id: str, member: dict[str, Any], why: str, attempt: int | None = None
) -> dict[str, Any]:
    """A member that never ran (its dependency failed, the swarm aborted or timed out), or
    an attempt of it that could not start."""
    outcome = {
        "phase": "end",
        "index": member["index"],
        "role": member["role"],
        "mode": member["mode"],
        "model": member["model"],
        "attempt": attempt,
        "session_id": None,
        "verdict": "error",
        "result": None,
        "reason": why,
        "steps": 0,
        "timed_out": False,
        "workdir": None,
        "ended_at": time.time(),
    }
    which = "skip" if attempt is None else attempt
    return _append(coordinator_id, f"swarm:end:{member['index']}:{which}", outcome)


def reassigned(coordinator_id: str, member: dict[str, Any]) -> dict[str, Any] | None:
    """The member given to another role or model (the team's `reassign_to`; else the
    coordinator's model; else another role of the same mode), or None when there is none."""
    svc = services()
    spec = _spec(svc.session_identity(coordinator_id))
    team = spec.team
    target = spec.recovery.reassign_to
    current_role = member.get("assigned_role") or member["role"]
    role = None
    model = None
    if target and ":" in target:
        model = target
    elif target:
        role = target
    elif member["model"] != spec.coordinator_model:
        model = spec.coordinator_model
    elif team is not None:
        role = next(
            (m.role for m in team.members if m.mode == member["mode"] and m.role != current_role),
            None,
        )
    if role is None and model is None:
        return None
    moved = dict(member)
    if role is not None:
        team_role = team.role(role) if team else None
        if team_role is None:
            return None
        wanted, _ = route(role, None, team_role.model or None, None, spec.routing)
        moved.update(
            assigned_role=role,
            system_prompt=team_role.system_prompt,
            tools=team_role.tools,
            agent=team_role.agent,
        )
    else:
        wanted = spec.routing.aliases.get(model or "", model or "")
    try:
        moved["model"] = normalize(svc.providers, wanted)
    except Exception:
        return None
    if moved["model"] not in {m.name for m in svc.available_models()}:
        return None
    if moved["model"] == member["model"] and role is None:
        return None
    return moved


# -- the end ------------------------------------------------------------------------------


def record_swarm_result(session_id: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Store the swarm's verdict and merged result (`swarm:result`, and the session's
    result); returns the stored one."""
    stored = _append(session_id, "swarm:result", {"phase": "result", **doc, "at": time.time()})
    services().catalog.update_session(
        session_id, result={k: v for k, v in stored.items() if k != "phase"}
    )
    return stored
