"""The plugin file formats, validated at the edge: agent and skill front matter, plugin.json,
tools.json. PilotSwarm's spellings (`initialPrompt`) are read as they are; unknown fields are
kept (a newer PilotSwarm may add some) and reported as warnings, never fatal."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr

# Where an agent's compaction may start, as a share of the model's window.
COMPACT_AT_RANGE = (0.2, 0.95)


def window_share(value: Any) -> float:
    """`60%`, `60` or `0.6` as 0.6; between 20 % and 95 % of the window, else an error
    that says so."""
    text = str(value).strip()
    try:
        number = float(text.removesuffix("%"))
    except ValueError:
        number = -1.0
    if isinstance(value, bool):
        number = -1.0
    share = number / 100 if text.endswith("%") or number > 1 else number
    low, high = COMPACT_AT_RANGE
    if not low <= share <= high:
        raise ValueError(
            f"must be between {low:.0%} and {high:.0%} of the window (as 60% or 0.6), not {text!r}"
        )
    return share


WindowShare = Annotated[float, BeforeValidator(window_share)]


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
    # Where older turns are compacted: a share of the model's window (a swarmdeck extension).
    compact_at: WindowShare | None = Field(None, alias="compactAt")
    # The tools whose schemas every prompt carries; the others are indexed until loaded.
    core_tools: list[StrictStr] | None = Field(None, alias="coreTools")


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
