"""What started a turn: a person's message, a parent agent, a sub-agent's update, a cron
tick, or the fleet (a system agent's start or restart). The loop journals it with the turn
and tools see it in their context, so guards can tell a person's request from a tick.

A turn's origin is that of the inputs it takes in since the model's previous turn, the
strongest first (a person's message among child updates makes a person's turn); a turn
that only continues after tool results keeps its predecessor's origin.
"""

from __future__ import annotations

PERSON, PARENT, CHILD, CRON, SYSTEM = "person", "parent", "child", "cron", "system"
UNKNOWN = "unknown"
STRENGTH = (PERSON, PARENT, CHILD, CRON, SYSTEM)
# Transcript keys of inputs that no person wrote.
FROM_PARENT_KEY = "inbox:from:"
RESTART_KEY = "restart:"


def input_origin(kind: str, key: str, *, has_parent: bool, system: bool) -> str | None:
    """Who an input entry of the transcript came from; None for what is not an input."""
    if kind == "task":
        # A system agent's first message is the fleet's, even under a parent agent.
        return SYSTEM if system else PARENT if has_parent else PERSON
    if kind == "user":
        if key.startswith(FROM_PARENT_KEY):
            return PARENT
        return SYSTEM if key.startswith(RESTART_KEY) else PERSON
    if kind == "child_update":
        return CHILD
    if kind == "timer":
        return CRON
    return None


def turn_origin(inputs: list[str], previous: str | None) -> str:
    """The origin of a turn that takes in these inputs after a turn of `previous` origin."""
    for origin in STRENGTH:
        if origin in inputs:
            return origin
    return previous or UNKNOWN
