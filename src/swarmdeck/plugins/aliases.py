"""Tool names of the formats swarmdeck reads (PilotSwarm, the Copilot SDK) that mean a
swarmdeck tool, so their plugin folders load as they are. One table."""

from __future__ import annotations

TOOL_ALIASES: dict[str, str] = {
    "bash": "shell",
    # write_artifact already answers with the artifact:// link export_artifact gave.
    "export_artifact": "write_artifact",
    "delete_agent": "cancel_agent",
    "view": "read_file",
    "create": "write_file",
    "edit": "edit_file",
}


def resolve_tool(name: str) -> str:
    """The swarmdeck tool a name means (itself when it is not an alias)."""
    return TOOL_ALIASES.get(name, name)


def resolve_tools(names: list[str]) -> list[str]:
    """Names resolved, each once, in order."""
    out: list[str] = []
    for name in names:
        resolved = resolve_tool(name)
        if resolved not in out:
            out.append(resolved)
    return out
