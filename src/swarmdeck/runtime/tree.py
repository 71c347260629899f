"""Steps that manage a session's sub-agents, inbox and timers in the catalog."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import (
    TERMINAL_STATUSES,
    InboxItem,
    InboxPost,
    SessionRecord,
    system_session_id,
)
from swarmdeck.runtime.agents import agent_session, skills_shown
from swarmdeck.runtime.crashpoints import crash_point
from swarmdeck.runtime.family import FAMILY_OPTION, Family
from swarmdeck.runtime.history import CONVERSATION_KINDS
from swarmdeck.runtime.project_docs import PROJECT_DOCS_OPTION
from swarmdeck.runtime.prompts import DEFAULT_SYSTEM_PROMPT, skill_index
from swarmdeck.runtime.services import EngineOps, services
from swarmdeck.runtime.traced import child_trace_options
from swarmdeck.tools.tool_index import DEFAULT_CORE
from swarmdeck.workspace.modes import child_options

PREVIEW = 400
# Session options a child takes from its parent.
INHERITED_OPTIONS = (
    "max_children",
    "max_depth",
    "no_sandbox",
    "plugins",
    "mcp_servers",
    PROJECT_DOCS_OPTION,
)


def child_id_for(parent_id: str, call_key: str) -> str:
    """A child's id derived from the call that spawned it, so a rerun finds the same child."""
    digest = hashlib.sha256(f"{parent_id}/{call_key}".encode()).hexdigest()[:10]
    return f"{parent_id[:40]}.{digest}"


def child_limits(parent: SessionRecord) -> tuple[int, int]:
    """How many levels sessions may nest below the root, and how many live sub-agents this
    parent may have: its own options', else the settings'."""
    limits = services().settings
    max_depth = int(parent.options.get("max_depth", limits.max_depth))
    return max_depth, int(parent.options.get("max_children", limits.max_children))


def may_spawn(parent: SessionRecord) -> bool:
    """Whether the limits leave this session room for a sub-agent at all."""
    max_depth, max_children = child_limits(parent)
    return max_children > 0 and parent.depth + 1 <= max_depth


def spawn_child(parent_id: str, call_key: str, args: dict[str, Any]) -> dict[str, Any]:
    """Create a child session record within the limits; returns {id} or {error}."""
    svc = services()
    parent = svc.catalog.get_session(parent_id)
    child_id = child_id_for(parent_id, call_key)
    if svc.catalog.find_session(child_id):
        return {"id": child_id}  # a rerun after a crash: created (with its task) before it
    max_depth, max_children = child_limits(parent)
    if parent.depth + 1 > max_depth:
        return {
            "error": f"depth limit: sessions may nest at most {max_depth} levels below the root"
        }
    if svc.catalog.live_children(parent_id) >= max_children:
        return {
            "error": f"child limit: at most {max_children} live sub-agents; wait for or cancel some"
        }
    spec, error = _child_spec(parent, args)
    if error:
        return {"error": error}
    svc.catalog.create_session(
        session_id=child_id,
        parent_id=parent_id,
        root_id=parent.root_id,
        depth=parent.depth + 1,
        model=spec["model"],
        mode=parent.mode,
        workdir=parent.workdir,
        run_dir=parent.run_dir,
        task=spec["task"],
        agent=spec["agent"],
        title=args.get("title"),
        system_message=spec["system_message"],
        tool_names=spec["tool_names"],
        options={
            "one_shot": True,
            "max_turns": parent.options.get("max_turns", 50),
            **_children_family(parent, spec),
            # The tree's limits hold at every level, not only below the root.
            **{k: parent.options[k] for k in INHERITED_OPTIONS if k in parent.options},
            **spec["options"],
            # A store session's sub-agent: a workspace of its own, from the parent's files.
            **child_options(svc.settings, svc.catalog, parent.options, child_id),
            # The spawn_agent call's span: the child's spans join the parent's trace.
            **child_trace_options(),
        },
    )
    crash_point("spawn.recorded")
    return {"id": child_id}


SUB_AGENT_NOTE = (
    "You are a sub-agent: your parent gave you your task below and gets your final answer."
)


def _children_family(parent: SessionRecord, spec: dict[str, Any]) -> dict[str, Any]:
    """The family a parent's plain sub-agents share (runtime/family.py): the parent's own
    when it is one of a family, else one for its children. A named agent's child, or one
    given its own tools, builds its own prompt."""
    if not services().settings.shared_prefix:
        return {}
    if spec["agent"] is not None or spec["tool_names"] is not None:
        return {}
    family = Family.of(parent.options)
    if family is None:
        family = _family_of_children(parent)
    return {FAMILY_OPTION: family.as_option()}


def shares_own_prompt(parent: SessionRecord) -> bool:
    """Whether a parent's plain sub-agents are shown its own prompt, byte for byte: its
    prompt and its tools are its mode's (no prompt, tool list or core set of its own)."""
    own_tools = parent.tool_names is not None or parent.options.get("core_tools") is not None
    return not parent.system_message and not own_tools


def _family_of_children(parent: SessionRecord) -> Family:
    """The family of the sub-agents of a parent that is in none.

    A plain parent's own prompt is the family's, byte for byte: the default prompt, the
    project's instructions, the skill index, its mode's tools and core set. Its children's
    first requests are then served from the prefix the parent's own turns cached, not only
    from a sibling's; that they are sub-agents opens their first message. A parent with a
    prompt of its own (a named agent, a dispatch mode), or tools of its own (its own list,
    or core set), does not hand it down: its children share the default prompt, with the
    note in it. The core set is chosen as the parent's own is (offered._own_core): the
    settings' for the mode, even an empty one, else the mode's default.
    """
    svc = services()
    tools = tuple(t.name for t in svc.tools.for_mode(parent.mode, None))
    core = svc.settings.core_tools.get(parent.mode)
    if core is None:
        core = DEFAULT_CORE.get(parent.mode, DEFAULT_CORE["explore"])
    default = DEFAULT_SYSTEM_PROMPT.format(workdir=parent.workdir)
    project = parent.options.get(PROJECT_DOCS_OPTION) or ""
    if not shares_own_prompt(parent):
        system = "\n\n".join(p for p in (f"{default}\n{SUB_AGENT_NOTE}", project) if p)
        return Family(system, tools, tuple(core), parent.mode)
    skills = skill_index(skills_shown(parent, svc.session_plugins))
    system = "\n\n".join(p for p in (default, project, skills) if p)
    return Family(system, tools, tuple(core), parent.mode, note=SUB_AGENT_NOTE)


def _child_spec(parent: SessionRecord, args: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    spec: dict[str, Any] = {
        "model": args.get("model") or parent.model,
        "task": args.get("task"),
        "system_message": args.get("system_message"),
        "tool_names": args.get("tool_names"),
        "agent": None,
        "options": {},
    }
    name = args.get("agent_name")
    if name:
        plugin_set = services().session_plugins(parent)
        agent = plugin_set.agent(name)
        if agent is None:
            known = ", ".join(sorted(plugin_set.agents)) or "none"
            return spec, f"no agent named {name} (known: {known}; see list_agents)"
        if agent.system:
            sid = system_session_id(agent.agent_id)
            return spec, (
                f"{name} is a system agent: it runs by itself as {sid}, once per store, "
                "and is never spawned"
            )
        named = agent_session(agent, plugin_set, args.get("task"), parent.options.get("plugins"))
        spec["agent"] = named.agent
        spec["system_message"] = spec["system_message"] or named.system_message
        spec["tool_names"] = spec["tool_names"] or named.tool_names
        spec["model"] = args.get("model") or named.model or parent.model
        spec["task"] = named.task
        spec["options"] = named.options
    if not spec["task"]:
        return spec, "spawn_agent needs a task or an agent_name"
    if spec["model"] != parent.model:
        spec["model"], error = _available(spec["model"])
        if error:
            return spec, error
    return spec, None


def _available(model: str) -> tuple[str, str | None]:
    """The exact provider:model of a model a ready provider serves, or why not."""
    from swarmdeck.models.available import normalize

    svc = services()
    valid = [m.name for m in svc.available_models()]
    try:
        exact = normalize(svc.providers, model)
    except Exception:
        exact = model
    if exact in valid:
        return exact, None
    listed = ", ".join(valid) or "none (no provider is ready)"
    return model, f"model {model!r} is not available; use one of: {listed}"


def children_summary(parent_id: str, ids: list[str] | None) -> dict[str, Any]:
    """Status and output of the parent's children (or the named ones)."""
    catalog = services().catalog
    children = catalog.list_sessions(parent_id=parent_id, limit=10_000)
    if ids is not None:
        known = {c.id for c in children}
        unknown = [i for i in ids if i not in known]
        if unknown:
            return {"error": f"not your sub-agents: {', '.join(unknown)}", "done": True, "rows": []}
        children = [c for c in children if c.id in ids]
    rows = [
        {
            "id": c.id,
            "title": c.title or c.task[:60],
            "status": c.status,
            "output": (c.final_text or "")[:PREVIEW],
            "result": c.result,
            "error": c.error,
        }
        for c in sorted(children, key=lambda c: c.created_at)
    ]
    return {"rows": rows, "done": all(r["status"] in TERMINAL_STATUSES for r in rows)}


def group_peer(sender_id: str, target_id: str) -> dict[str, Any]:
    """{title} of the sender when the target is a live session of the sender's group (its
    head or a member), else {error}. A group (a swarm) is a session and those of its
    children that name it (SessionRecord.group): they may message one another."""
    catalog = services().catalog
    sender = catalog.get_session(sender_id)
    group = sender.group
    target = catalog.find_session(target_id)
    if group is None or target is None or target.group != group:
        return {"error": f"{target_id} is not your sub-agent nor a member of your swarm"}
    if target.terminal:
        return {"error": f"{target_id} has ended ({target.status}); it reads no more messages"}
    return {"title": sender.title or sender.id}


# The payload flag of a broadcast: a member that starts later is given those its head got.
BROADCAST = "broadcast"


def group_members(sender_id: str) -> dict[str, Any]:
    """{head, ids, title}: the group's head and its live members other than the sender (and
    the head), or {error} when the sender is in no group."""
    catalog = services().catalog
    sender = catalog.get_session(sender_id)
    group = sender.group
    if group is None:
        return {"error": "you are not a member of a swarm: there is no one to broadcast to"}
    members = [
        c.id
        for c in sorted(catalog.list_sessions(parent_id=group, limit=10_000), key=_created)
        if c.group == group and c.id != sender_id and not c.terminal
    ]
    return {"head": group, "ids": members, "title": sender.title or sender.id}


def broadcasts_of(head_id: str) -> list[InboxPost]:
    """The broadcasts a group's head received, as posts to hand a member that starts now."""
    found = services().catalog.delivered(head_id, "from:")
    return [InboxPost("", i.msg_id, i.kind, i.payload) for i in found if i.payload.get(BROADCAST)]


def _created(record: SessionRecord) -> float:
    return record.created_at


def tree_summary(session_id: str) -> list[dict[str, Any]]:
    """Every session of this session's tree."""
    catalog = services().catalog
    root = catalog.get_session(session_id).root_id
    return [
        {"id": s.id, "parent_id": s.parent_id, "status": s.status, "title": s.title or s.task[:60]}
        for s in catalog.list_sessions(root_id=root, limit=10_000)
    ]


async def post_message(session_id: str, msg_id: str, kind: str, payload: dict[str, Any]) -> bool:
    """Put a message in a session's inbox and ring its doorbell."""
    svc = services()
    fresh = await asyncio.to_thread(svc.catalog.post, session_id, msg_id, kind, payload)
    crash_point("message.posted")
    await ring(session_id)
    return fresh


def drain_inbox(
    session_id: str,
    claim: str,
    kinds: list[str] | None,
    record: bool,
    wake: bool = False,
    rang: bool = False,
    once: bool = False,
) -> list[dict[str, Any]]:
    """Take pending inbox messages (into the transcript when `record`); returns them.

    A rerun with the same claim takes the same messages again, and records them once.
    With `wake`, a resting session that takes messages is marked running at once.
    `rang`: the doorbell rang, so mail is expected; it is claimed without a look first.
    `once`: the claim is the drain's only record (it runs in no engine step): messages
    already under it answer it alone.
    """
    catalog = services().catalog
    status = "running" if wake else None
    recorded = _transcript_kind if record else None
    items = catalog.drain(
        session_id, claim, kinds, status, recorded, look_first=not rang, once=once
    )
    return _plain(items)


def taken_under(session_id: str, claim: str) -> list[dict[str, Any]]:
    """What a drain took under `claim` (a read): a replayed drain's answer, when the claim
    is its only record."""
    return _plain(services().catalog.taken_under(session_id, claim))


def _plain(items: list[InboxItem]) -> list[dict[str, Any]]:
    return [{"msg_id": i.msg_id, "kind": i.kind, "payload": i.payload} for i in items]


def _transcript_kind(inbox_kind: str) -> str:
    """The transcript kind of a message taken in: a sub-agent's answer is the user's turn."""
    return "user" if inbox_kind == "answer" else inbox_kind


def mail_pending(session_id: str, kinds: list[str]) -> bool:
    """True when messages of these kinds wait in the session's inbox (a read)."""
    return services().catalog.pending_count(session_id, kinds) > 0


def wait_look(
    session_id: str, kinds: list[str], seconds: float, deadline: float | None = None
) -> dict[str, Any]:
    """One look of a wait at the inbox, with the clock and the status, in one step.

    The first look (no deadline yet) marks the session `waiting` before it looks, as a
    wait always did, and fixes the deadline `seconds` from now. The look that finds a
    message or the deadline passed ends the wait and marks the session `running` again.
    Returns {pending, now, deadline, over}, journaled together, so a replay takes the
    same path.
    """
    catalog = services().catalog
    if deadline is None:
        catalog.set_status(session_id, "waiting")
    pending, now = mail_pending(session_id, kinds), time.time()
    if deadline is None:
        deadline = now + seconds
    over = pending or now >= deadline
    if over:
        catalog.set_status(session_id, "running")
    return {"pending": pending, "now": now, "deadline": deadline, "over": over}


def mail_look(session_id: str, kinds: list[str], deadline: float) -> dict[str, Any]:
    """A look of a wait (format 4) after its doorbell rang: {pending, over}, over when a
    message waits or the deadline has passed. Reads only: the wait's status moves with
    the transcript entries around it."""
    pending = mail_pending(session_id, kinds)
    return {"pending": pending, "over": pending or time.time() >= deadline}


def model_resting(session_id: str) -> bool:
    """True when the model ended its last turn, or the turn cap ended its wake-up, and
    nothing came after it to answer."""
    last = services().catalog.last_event(session_id, [*CONVERSATION_KINDS, "notice"])
    if last is not None and last.kind == "notice":
        return last.payload.get("what") == "turn_cap"
    return last is not None and last.kind == "assistant" and not last.payload["tool_calls"]


async def cancel_tree(session_id: str, reason: str, tell_parent: bool = True) -> list[str]:
    """Cancel a session and its descendants that are still live; returns their ids.

    The parent of the cancelled session is told (unless it asked for the cancel itself),
    so a parent waiting for its sub-agents wakes up instead of waiting for its timeout.
    """
    live, told = await asyncio.to_thread(mark_cancelled, session_id, reason, tell_parent)
    await _ops().cancel(live)
    for sid in live:
        # A workflow resting on its doorbell only notices the cancel at its next step:
        # wake it so it stops now instead of holding its waiter until the recv times out.
        await ring(sid)
    if told is not None:
        await ring(told)
    return live


def mark_cancelled(
    session_id: str, reason: str, tell_parent: bool, catalog: Catalog | None = None
) -> tuple[list[str], str | None]:
    """Record the cancel of a session and its live descendants; returns their ids, and the
    parent told of it (whose doorbell the caller rings). With a `catalog`, no engine is
    needed: the workers running them stop them (runtime/duties.py)."""
    catalog = catalog or services().catalog
    records = [catalog.get_session(i) for i in [session_id, *catalog.descendant_ids(session_id)]]
    entry = {"status": "cancelled", "error": reason, "reason": "cancelled"}
    live: list[str] = []
    told: str | None = None
    for r in records:
        # Only the cancelled session's parent hears of it: the others' parents are in the
        # cancelled subtree themselves.
        notice = parent_notice(r, "cancelled", None) if r.id == session_id and tell_parent else None
        if r.terminal or not catalog.end_session(
            r.id, f"end:g{r.generation}", entry, notice, status="cancelled", error=reason
        ):
            continue
        live.append(r.id)
        told = notice.session_id if notice is not None else told
    return live, told


def cancel_in_catalog(catalog: Catalog, session_id: str, reason: str) -> list[str]:
    """Cancel a session tree in the catalog alone, from a process without an engine; the
    workers that run its sessions stop their workflows. Returns the ids cancelled."""
    return mark_cancelled(session_id, reason, True, catalog)[0]


def set_cron(session_id: str, cron: dict[str, Any] | None) -> None:
    """Store (or clear) the session's recurring wake-up."""
    catalog = services().catalog
    options = dict(catalog.get_session(session_id).options)
    options["cron"] = cron
    catalog.update_session(session_id, options=options)


def parent_notice(child: SessionRecord, status: str, final_text: str | None) -> InboxPost | None:
    """The update a child's end leaves in its parent's inbox (batched there); None for a
    root session. One per generation: a rerun of the end posts nothing new."""
    if not child.parent_id:
        return None
    text = f"sub-agent {child.id} ({child.title or child.task[:40]}) ended: {status}"
    if final_text:
        text += f"\n{final_text[:PREVIEW]}"
    return InboxPost(
        child.parent_id,
        f"child:{child.id}:{child.generation}",
        "child_update",
        {"text": text, "child_id": child.id, "status": status},
    )


async def ring(session_id: str) -> None:
    """Wake a session that waits on its doorbell (the message itself is in its inbox)."""
    await _ops().ring(session_id)


def _ops() -> EngineOps:
    ops = services().engine_ops
    if ops is None:
        raise RuntimeError("the engine is not launched in this process")
    return ops
