"""The coordinator's member steps: a member's session created once (in its worktree when it
writes), its outcome classified once, a skipped or reassigned member recorded."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.dispatch.modes import get_mode
from swarmdeck.dispatch.settings import load_dispatch_settings
from swarmdeck.dispatch.verdict import RunFacts, build_verdict
from swarmdeck.errors import SwarmdeckError
from swarmdeck.models.available import normalize
from swarmdeck.runtime.agents import agent_session, agent_tools
from swarmdeck.runtime.family import FAMILY_OPTION, TASK_HEADING
from swarmdeck.runtime.project_docs import PROJECT_DOCS_OPTION
from swarmdeck.runtime.services import Services, services
from swarmdeck.runtime.traced import child_trace_options
from swarmdeck.runtime.tree import broadcasts_of
from swarmdeck.swarm.phases import SUBMIT_RESULT, SWARM_TOOLS, append_entry, stored_in, swarm_spec
from swarmdeck.swarm.prompts import family_member_prompt, member_prompt, member_task
from swarmdeck.swarm.routing import route
from swarmdeck.swarm.spec import SwarmSpec
from swarmdeck.workspace.rundir import RunDir

# A member step: (coordinator id, member, attempt, ...) -> its journal entry.
MemberStep = Callable[..., dict[str, Any]]


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


def _once_per(phase: str) -> Callable[[MemberStep], MemberStep]:
    """Make a member's step decide once per attempt: its entry `swarm:PHASE:I:A` in the
    coordinator's journal is stored the first time, and a rerun after a crash returns it."""

    def once(step: MemberStep) -> MemberStep:
        @functools.wraps(step)
        def decided(
            coordinator_id: str, member: dict[str, Any], attempt: int, *args: Any
        ) -> dict[str, Any]:
            key = f"swarm:{phase}:{member['index']}:{attempt}"
            stored = stored_in(services().catalog, coordinator_id, key)
            if stored is not None:
                return stored
            return append_entry(coordinator_id, key, step(coordinator_id, member, attempt, *args))

        return decided  # type: ignore[return-value]

    return once


@_once_per("spawn")
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
    coordinator = svc.session_identity(coordinator_id)
    spec = swarm_spec(coordinator)
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
        return {**failed, "error": f"it could not start: {exc.message}"}
    # What members broadcast before this one existed: it hears it too (after its creation,
    # so a broadcast that listed the members before it is still in its head's inbox).
    for post in broadcasts_of(coordinator_id):
        catalog.post(session_id, post.msg_id, post.kind, post.payload)
    return _spawn_entry(member, attempt, session_id, workdir, worktree)


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
    # A member that runs as a named agent keeps that agent's tools and prompt to itself.
    family = coordinator.options.get(FAMILY_OPTION) if agent_tool_names is None else None
    if family:
        # Its role opens its task, after what it shares with the members of its mode.
        everyone = [(r, m, sid) for r, m, sid in peers]
        prompt, role = family_member_prompt(
            member, workdir, step_cap, coordinator.id, everyone, agent_prompt
        )
        task = f"{role}\n\n{TASK_HEADING}{task}"
    else:
        others = [(r, m, sid) for r, m, sid in peers if sid != session_id]
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
            # The coordinator's project instructions (runtime/project_docs.py).
            **{k: v for k, v in coordinator.options.items() if k == PROJECT_DOCS_OPTION},
            # The coordinator's span: the member's spans join the swarm's trace.
            **child_trace_options(),
            # One cached prefix with the coordinator and the other members.
            **({FAMILY_OPTION: family} if family else {}),
        },
    )


def _reason(verdict: Any, record: SessionRecord, why: str | None) -> str | None:
    if verdict.verdict == "completed":
        return None
    parts = [why] if why else []
    if record.error and record.error not in parts:
        parts.append(record.error)
    if verdict.parse_error:
        parts.append(verdict.parse_error)
    return "; ".join(parts) or verdict.reason


@_once_per("end")
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
    return {
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
    return append_entry(coordinator_id, f"swarm:end:{member['index']}:{which}", outcome)


def reassigned(coordinator_id: str, member: dict[str, Any]) -> dict[str, Any] | None:
    """The member given to another role or model (the team's `reassign_to`; else the
    coordinator's model; else another role of the same mode), or None when there is none."""
    svc = services()
    spec = swarm_spec(svc.session_identity(coordinator_id))
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
