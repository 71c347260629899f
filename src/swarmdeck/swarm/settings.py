"""Swarm routing and limits from `<home>/settings.yaml`: `swarm:` and `model_aliases:`."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swarmdeck.config import SETTINGS_FILE, user_settings
from swarmdeck.errors import ConfigError

DEFAULT_MAX_MEMBERS = 5


class SwarmSettings(BaseModel):
    """`swarm:` in settings.yaml, every field optional."""

    model_config = ConfigDict(extra="forbid")

    max_members: int = Field(DEFAULT_MAX_MEMBERS, ge=1, le=50)
    # The model of members whose role names none anywhere else (before the coordinator's).
    member_model: str | None = None
    # The model of each role, when neither the plan nor the team names one.
    role_models: dict[str, str] = Field(default_factory=dict)
    # Other names for models: `fast: deepseek:deepseek-chat`; applied last when routing.
    model_aliases: dict[str, str] = Field(default_factory=dict)


def load_swarm_settings(home: Path) -> SwarmSettings:
    """The swarm settings of this home (the defaults when settings.yaml has none)."""
    data = user_settings(home)
    swarm = data.get("swarm") or {}
    aliases = data.get("model_aliases") or {}
    if not isinstance(swarm, dict) or not isinstance(aliases, dict):
        raise ConfigError(
            f"{home / SETTINGS_FILE}: `swarm` and `model_aliases` must be mappings", "fix the file"
        )
    try:
        return SwarmSettings.model_validate({**swarm, "model_aliases": aliases})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        prefix = "" if where.startswith("model_aliases") else "swarm."
        raise ConfigError(
            f"{home / SETTINGS_FILE}: {prefix}{where}: {first['msg']}", "fix the file"
        ) from None
