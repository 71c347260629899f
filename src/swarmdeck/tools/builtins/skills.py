"""`load_skill`: the model loads a skill of its index on demand. The call's stored result is
the record: the skill stays loaded after a crash, and its tools.json tools are offered from
the session's next turn on (see runtime/journal.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from swarmdeck.errors import ToolError
from swarmdeck.tools.base import ALL_MODES, Effect, Tool, ToolContext

LOAD_SKILL = "load_skill"


class LoadSkillArgs(BaseModel):
    """Load one skill of your index."""

    name: str = Field(description="The skill's name, as the index lists it.")


async def _load(ctx: ToolContext, args: LoadSkillArgs) -> str:
    skills = ctx.services.get("skills") or {}
    skill = skills.get(args.name)
    if skill is None:
        known = ", ".join(sorted(skills)) or "none"
        raise ToolError(f"no skill named {args.name!r} (your skills: {known})")
    known_tools = set(ctx.services.get("tool_names") or ())
    head = f"skill {skill.name} loaded."
    if skill.tools:
        usable = [t for t in skill.tools if t in known_tools]
        missing = [t for t in skill.tools if t not in known_tools]
        if usable:
            head += f" Its tools are yours from your next turn: {', '.join(usable)}."
        if missing:
            head += f" Not available here: {', '.join(missing)}."
    return f"{head}\n\n{skill.body}"


LOAD_SKILL_TOOL = Tool(
    LOAD_SKILL,
    "Load a skill of your index: its instructions, and the tools it brings from your next turn.",
    LoadSkillArgs,
    Effect.READ,
    _load,
    modes=ALL_MODES,
)
