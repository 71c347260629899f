"""What the swarm's models read: the coordinator's prompt, a member's prompt and task, and the
aggregate turn's message."""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

from swarmdeck.dispatch.modes import get_mode
from swarmdeck.runtime.family import ROLE_HEADING
from swarmdeck.swarm.team import Team

RESULT_CHARS = 6000


@cache
def _text(name: str) -> str:
    return (files("swarmdeck.swarm") / "prompts" / f"{name}.md").read_text(encoding="utf-8")


def coordinator_prompt(workdir: str, team: Team | None, max_members: int, code_note: str) -> str:
    """The coordinator's system prompt: how to plan, the team's roles, the example."""
    if team is not None:
        lines = [f'The roles of the team "{team.name}" ({team.description}):']
        for m in team.members:
            mode = f" ({m.mode})" if m.mode else ""
            about = f": {m.description}" if m.description else ""
            lines.append(f"- {m.role}{mode}{about}")
        lines.append("Plan with these roles; add another only when none fits.")
        roles = "\n".join(lines) + "\n"
        example = [
            {
                "role": m.role,
                "task": f"<the {m.role}'s part of the task>",
                "mode": m.mode or "explore",
            }
            for m in team.members[:max_members]
        ]
    else:
        roles = "There is no team: choose the roles yourself.\n"
        example = [
            {
                "role": "explorer",
                "task": "<find where X is handled; report file:line>",
                "mode": "explore",
            },
            {
                "role": "reviewer",
                "task": "<review the code that handles X>",
                "mode": "review",
                "depends_on": ["explorer"],
            },
        ]
    return (
        _text("coordinator")
        .replace("@WORKDIR@", workdir)
        .replace("@MAX_MEMBERS@", str(max_members))
        .replace("@CODE_NOTE@", code_note)
        .replace("@ROLES@", roles)
        .replace("@EXAMPLE@", json.dumps({"members": example}, indent=2))
    )


SWARM_RULES = (
    "- `message_agent(agent_id, text)` sends a message to one member, or to the "
    "coordinator; `broadcast(text)` to every other member. "
    "Messages from others reach you as user messages between your turns.\n"
    "- `memory_get`, `memory_set`, `memory_list`, `memory_delete`: the swarm's shared "
    "blackboard. Every write is a new version; pass `expected_version` to write only "
    "over the version you read (on a conflict you get the current value).\n"
    "- Only a member's submitted result reaches the coordinator: members finish with "
    "`submit_result`."
)


def swarm_context() -> str:
    """What the coordinator and every member read alike, in every swarm: what a swarm is and
    how its members reach each other. The start of every prompt of every swarm run in one
    project, which the vendors' caches then serve once for all of them. The swarm's own
    task is the coordinator's first message; a member is given its own part of it, as
    when the swarm shares no prefix."""
    return (
        "You are part of a swarmdeck swarm: a coordinator plans the work and starts members, "
        "each with a role, that work at once and report to it.\n\n"
        f"{SWARM_RULES}"
    )


def member_prompt(
    member: dict[str, Any],
    workdir: str,
    step_cap: int,
    coordinator_id: str,
    peers: list[tuple[str, str, str]],
    agent_prompt: str | None,
) -> str:
    """A member's own prompt: its agent's (when it has one), its mode's (the result it
    must submit), its role, and how to reach the rest of the swarm (`peers`: the others)."""
    spec = get_mode(member["mode"])
    parts = [agent_prompt] if agent_prompt else []
    parts.append(spec.prompt(workdir, step_cap))
    parts.append(_role(member))
    listed = "\n".join(f"- {r} ({mode}): {sid}" for r, mode, sid in peers) or "- none"
    parts.append(
        f"## The swarm\n\nYou are one member of the swarm that {coordinator_id} coordinates. "
        f"The other members:\n{listed}\n\n"
        "- `message_agent(agent_id, text)` sends a message to one member, or to the "
        f"coordinator ({coordinator_id}); `broadcast(text)` to every other member. "
        "Messages from others reach you as user messages between your turns.\n"
        "- `memory_get`, `memory_set`, `memory_list`, `memory_delete`: the swarm's shared "
        "blackboard. Every write is a new version; pass `expected_version` to write only "
        "over the version you read (on a conflict you get the current value).\n"
        "- Only your submitted result reaches the coordinator: finish with `submit_result`."
    )
    return "\n\n".join(parts)


def family_member_prompt(
    member: dict[str, Any],
    workdir: str,
    step_cap: int,
    coordinator_id: str,
    members: list[tuple[str, str, str]],
    agent_prompt: str | None,
) -> tuple[str, str]:
    """The prompt of a member that shares its swarm's prefix (runtime/family.py), and its
    role, which opens its task. The swarm's rules are in the shared context already
    (swarm_context), and the prompt is the same for every member of one mode (and agent)
    in one workdir, all the members listed: the vendors' caches serve it to all but the
    first."""
    listed = "\n".join(f"- {r} ({mode}): {sid}" for r, mode, sid in members) or "- none"
    parts = [agent_prompt] if agent_prompt else []
    parts.append(get_mode(member["mode"]).prompt(workdir, step_cap))
    parts.append(
        f"## The swarm\n\nYou are one member of the swarm that {coordinator_id} coordinates. "
        f"Its members:\n{listed}"
    )
    return "\n\n".join(parts), _role(member)


def _role(member: dict[str, Any]) -> str:
    role = f"{ROLE_HEADING}{member['role']}"
    if member.get("system_prompt"):
        role += "\n\n" + member["system_prompt"].strip()
    return role


def _clip(doc: Any) -> str:
    text = json.dumps(doc, ensure_ascii=False)
    return text if len(text) <= RESULT_CHARS else text[: RESULT_CHARS - 1] + "…"


def member_task(
    member: dict[str, Any], dependencies: list[dict[str, Any]], failed_before: str | None
) -> str:
    """A member's first message: its task, what the members it depends on found, and why
    an earlier attempt failed."""
    text = member["task"].strip()
    if dependencies:
        lines = ["", "Results of the members this task depends on:"]
        for dep in dependencies:
            lines.append(f"- {dep['role']} ({dep['verdict']}): {_clip(dep.get('result'))}")
        text += "\n".join(lines)
    if failed_before:
        text += (
            f"\n\nAn earlier attempt at this task failed: {failed_before}. Avoid what made it "
            "fail, and submit a result in the schema of your mode."
        )
    return text


def aggregate_message(outcomes: list[dict[str, Any]], dropped: list[dict[str, Any]]) -> str:
    """The coordinator's last input: every member's verdict and validated result."""
    rows = [
        {
            "role": o["role"],
            "mode": o["mode"],
            "verdict": o["verdict"],
            **({"result": o["result"]} if o.get("result") is not None else {}),
            **({"why": o["reason"]} if o["verdict"] != "completed" and o.get("reason") else {}),
        }
        for o in outcomes
    ]
    text = "The members have finished. Their outcomes:\n" + _clip(rows)
    if dropped:
        text += "\nDropped from the plan before they ran: " + _clip(dropped)
    return (
        text + "\n\nNow answer in plain text, with no tool call: the merged result for the "
        "user. Lead with what matters most; keep file:line references; say what failed."
    )
