"""The engine's name for each generation of a session: what the steps and the management
operations need of the engine's identifiers, without the engine."""

from __future__ import annotations


def workflow_id(session_id: str, generation: int) -> str:
    """The workflow of one generation of a session."""
    return session_id if generation == 0 else f"{session_id}~g{generation}"


def session_of_workflow(wf_id: str) -> tuple[str, int]:
    """(session id, generation) of a session workflow's id."""
    session_id, _, generation = wf_id.partition("~g")
    return session_id, int(generation) if generation.isdigit() else 0
