"""swarmdeck: durable LLM agent sessions and a dispatch CLI for planners."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from swarmdeck.version import __version__

__all__ = ["AgentSpec", "Session", "SessionResult", "Swarm", "__version__", "tool"]

if TYPE_CHECKING:
    from swarmdeck.sdk import AgentSpec, Session, SessionResult, Swarm
    from swarmdeck.tools.decorator import tool


def __getattr__(name: str) -> Any:
    # Lazy, so `swarmdeck --help` does not pay for the engine and the SDK clients.
    if name in ("AgentSpec", "Session", "SessionResult", "Swarm"):
        from swarmdeck import sdk

        return getattr(sdk, name)
    if name == "tool":
        from swarmdeck.tools.decorator import tool

        return tool
    raise AttributeError(name)
