"""One cached prefix for a family of sessions: a swarm's coordinator and members, or the
sub-agents of one parent.

A vendor's prompt cache serves the longest prefix a request shares with one made before
under the same key: the tools, then the system prompt, then the messages. Sessions that
each build their own system prompt and tool list share nothing, so every member pays to
cache what its coordinator or a sibling already cached. A family's sessions are shown the
same tools in the same order and the same system prompt (what they have in common: the
base agent, the team's context, the tool index); what is each session's own (its role,
its mode's instructions, its agent's prompt, its workdir) opens its first message instead.
A tool shown that a session's mode may not use is refused where tools run, as any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from swarmdeck.models.types import Message

FAMILY_OPTION = "family"
# How a member's role opens its first message (swarm/prompts.py), before its own task.
ROLE_HEADING = "## Your role: "
TASK_HEADING = "## Your task\n\n"


@dataclass(frozen=True)
class Family:
    """What a family's sessions share: the system text, and the tools (by name, in order;
    `core` those shown whole, as a session's core set, the rest indexed); `note` opens
    each member's first message, after the shared prefix."""

    system: str
    tool_names: tuple[str, ...]
    core: tuple[str, ...]
    mode: str
    note: str = ""

    def as_option(self) -> dict[str, Any]:
        """The session option that makes a session one of the family."""
        return {
            "system": self.system,
            "tool_names": list(self.tool_names),
            "core": list(self.core),
            "mode": self.mode,
            **({"note": self.note} if self.note else {}),
        }

    @classmethod
    def of(cls, options: dict[str, Any]) -> Family | None:
        """The family a session's options name, or None."""
        raw = options.get(FAMILY_OPTION)
        if not isinstance(raw, dict):
            return None
        return cls(
            str(raw["system"]),
            tuple(raw["tool_names"]),
            tuple(raw["core"]),
            str(raw["mode"]),
            str(raw.get("note") or ""),
        )


def with_preamble(messages: list[Message], preamble: str | None) -> list[Message]:
    """The conversation with the session's own instructions opening its first message (the
    task): the prefix the whole family shares ends where this begins, and the sessions
    given the same instructions (one mode's members, a parent's sub-agents) share these
    too, up to their own task (`shared_upto`)."""
    if not preamble or not messages or messages[0].role != "user":
        return messages
    head = f"{preamble}\n\n"
    task = messages[0].content
    # A member's first message is its role, then its task, under headings of its own.
    own = task if task.startswith(ROLE_HEADING) else f"{TASK_HEADING}{task}"
    opened = Message("user", head + own, shared_upto=len(head))
    return [opened, *messages[1:]]
