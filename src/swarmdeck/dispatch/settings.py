"""Dispatch defaults a user may change in `<home>/dispatch.yaml`: step caps, timeouts, routes.

```yaml
step_caps: {code: 150, explore: 60}
timeout_s: 1800
idle_timeout_s: 600
routes: {review: anthropic, explore: deepseek}   # used by `swarmdeck init`
```
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from swarmdeck.errors import ConfigError

FILE_NAME = "dispatch.yaml"
DEFAULT_TIMEOUT_S = 1800.0
DEFAULT_IDLE_TIMEOUT_S = 600.0


class DispatchSettings(BaseModel):
    """The user's dispatch defaults; every field optional."""

    model_config = ConfigDict(extra="forbid")

    step_caps: dict[str, int] = Field(default_factory=dict)
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, ge=0)
    idle_timeout_s: float = Field(default=DEFAULT_IDLE_TIMEOUT_S, ge=0)
    routes: dict[str, str] = Field(default_factory=dict)


def load_dispatch_settings(home: Path) -> DispatchSettings:
    """`<home>/dispatch.yaml`, or the defaults when there is none."""
    path = home / FILE_NAME
    if not path.is_file():
        return DispatchSettings()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return DispatchSettings.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        detail = " ".join(str(exc).split())[:300]
        raise ConfigError(f"{path}: {detail}", "fix or remove the file") from None
