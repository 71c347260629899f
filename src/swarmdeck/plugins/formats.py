"""The plugin file formats, validated at the edge: agent and skill front matter, plugin.json,
tools.json. PilotSwarm's spellings (`initialPrompt`) are read as they are; unknown fields are
kept (a newer PilotSwarm may add some) and reported as warnings, never fatal."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr


class _Open(BaseModel):
    """A format whose unknown fields are kept, not refused."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def unknown_fields(self) -> dict[str, Any]:
        """The fields this format does not know, as they were written."""
        return dict(self.model_extra or {})


class CronSpec(BaseModel):
    """A recurring wake-up an agent starts with (a swarmdeck extension of the format)."""

    model_config = ConfigDict(extra="forbid")

    seconds: float = Field(gt=0, le=30 * 86400)
    reason: StrictStr = ""
    # A tool run before the model is woken; a quiet result means no model call at all.
    check: StrictStr | None = None
    args: dict[str, Any] = Field(default_factory=dict)


class AgentFrontMatter(_Open):
    """The front matter of an `*.agent.md` file."""

    name: StrictStr | None = None
    description: StrictStr = ""
    title: StrictStr | None = None
    system: StrictBool = False
    id: StrictStr | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,59}$")
    parent: StrictStr | None = None
    tools: list[StrictStr] | None = None
    skills: list[StrictStr] = Field(default_factory=list)
    initial_prompt: StrictStr | None = Field(None, alias="initialPrompt")
    splash: StrictStr | None = None
    model: StrictStr | None = None
    cron: CronSpec | None = None
    # The MCP servers (by their .mcp.json name) the agent's sessions get; without it, the
    # servers marked `default`.
    mcp_servers: list[StrictStr] | None = Field(None, alias="mcpServers")


class SkillFrontMatter(_Open):
    """The front matter of a `SKILL.md` file."""

    name: StrictStr | None = None
    description: StrictStr = ""


class SkillTools(_Open):
    """A skill's `tools.json`: the tools the skill makes available once loaded."""

    tools: list[StrictStr]


class PluginManifest(_Open):
    """A plugin's optional `plugin.json`."""

    name: StrictStr | None = None
    version: StrictStr | None = None
    description: StrictStr = ""
