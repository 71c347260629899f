"""What the maintenance tools ask of the runtime and the engine, without importing them:
the runtime puts an object of this shape in the tool context as `mgmt_ops`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class EngineRun:
    """One ended workflow run of a session, as the engine keeps it."""

    workflow_id: str
    session_id: str
    generation: int
    status: str
    updated_at: float


@dataclass(frozen=True)
class HistoryRemoved:
    """What deleting engine history removed."""

    runs: int = 0
    steps: int = 0
    bytes: int = 0


class MgmtOps(Protocol):
    """Engine and runtime operations of the maintenance tools."""

    async def ended_runs(self) -> list[EngineRun]:
        """Every ended workflow run of every session the engine still keeps."""
        ...

    def runs_of(self, generations: dict[str, int]) -> list[str]:
        """The workflow ids of every run of these sessions (session id -> latest generation)."""
        ...

    async def history_size(self, workflow_ids: list[str]) -> HistoryRemoved:
        """How much engine history these runs hold (nothing is deleted)."""
        ...

    async def delete_runs(self, workflow_ids: list[str]) -> HistoryRemoved:
        """Delete these ended runs' engine history (a run still going is left alone)."""
        ...

    async def terminate(self, session_id: str, reason: str) -> list[str]:
        """Cancel a session and its live descendants; returns the ids cancelled."""
        ...
