"""What a new session needs: built by the CLI, the SDK, a swarm or a named agent, and
created by the host."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class SessionRequest:
    """What a new session needs."""

    task: str
    model: str
    workdir: Path
    mode: str = "agent"
    title: str | None = None
    system_message: str | None = None
    tool_names: list[str] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    session_id: str | None = None
    agent: str | None = None
