"""Every built-in tool, in one list: what a session may be offered (by mode, by its tools)."""

from __future__ import annotations

from swarmdeck.tools.base import Tool


def builtin_tools() -> list[Tool]:
    """The built-in tools (imported here, not at module load: some cost start-up time)."""
    from swarmdeck.tools.builtins.artifacts import ARTIFACT_TOOLS
    from swarmdeck.tools.builtins.control import BROADCAST_TOOL, CONTROL_TOOLS
    from swarmdeck.tools.builtins.discovery import DISCOVERY_TOOLS
    from swarmdeck.tools.builtins.edit import EDIT_FILE
    from swarmdeck.tools.builtins.files import FILE_TOOLS
    from swarmdeck.tools.builtins.glob import GLOB
    from swarmdeck.tools.builtins.load_tools import LOAD_TOOLS_TOOL
    from swarmdeck.tools.builtins.memory import MEMORY_TOOLS
    from swarmdeck.tools.builtins.mgmt import MGMT_TOOLS
    from swarmdeck.tools.builtins.patch import APPLY_PATCH_TOOL
    from swarmdeck.tools.builtins.results import SUBMIT_RESULT_TOOL
    from swarmdeck.tools.builtins.shell import SHELL_TOOL
    from swarmdeck.tools.builtins.skills import LOAD_SKILL_TOOL
    from swarmdeck.tools.builtins.text_editor import TEXT_EDITOR_TOOL

    return [
        *FILE_TOOLS,
        EDIT_FILE,
        APPLY_PATCH_TOOL,
        GLOB,
        TEXT_EDITOR_TOOL,
        SHELL_TOOL,
        *ARTIFACT_TOOLS,
        *CONTROL_TOOLS,
        BROADCAST_TOOL,
        SUBMIT_RESULT_TOOL,
        LOAD_SKILL_TOOL,
        LOAD_TOOLS_TOOL,
        *DISCOVERY_TOOLS,
        *MGMT_TOOLS,
        *MEMORY_TOOLS,
    ]
