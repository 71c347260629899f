"""A session's system prompt: the packaged base agent, then the session's own prompt (or the
default), then the index of skills it may load. Kept short: every turn sends it."""

from __future__ import annotations

from swarmdeck.plugins.definitions import SkillDef
from swarmdeck.plugins.tiers import base_agent

DEFAULT_SYSTEM_PROMPT = """You work in {workdir}; paths are relative to it. Work in small verified
steps. When the task is done, end your turn with a short summary."""


def skill_index(skills: list[SkillDef]) -> str:
    """The skills as the model is shown them: a name and one line each."""
    if not skills:
        return ""
    lines = [f"- {s.name}: {' '.join(s.description.split())}" for s in skills]
    return "Skills, for load_skill(name):\n" + "\n".join(lines)


def system_prompt(
    workdir: str,
    custom: str | None,
    skills: list[SkillDef] | None = None,
    tools_index: str = "",
    project: str = "",
) -> str:
    """The base agent's body, the session's prompt (its own when given, else the default),
    the project's instructions, the skill index and the index of the tools it may load."""
    own = custom if custom else DEFAULT_SYSTEM_PROMPT.format(workdir=workdir)
    parts = [base_agent().body, own, project, skill_index(skills or []), tools_index]
    return "\n\n".join(p for p in parts if p)
