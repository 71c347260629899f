"""The engine operations the maintenance tools are given in their context (MgmtOps), on
the engine seam: they never import the runtime or DBOS."""

from __future__ import annotations

from swarmdeck.runtime.services import EngineOps
from swarmdeck.runtime.tree import cancel_tree
from swarmdeck.runtime.workflow_ids import session_of_workflow, workflow_id
from swarmdeck.tools.builtins.mgmt.ops import EngineRun, HistoryRemoved


class RuntimeMgmtOps:
    """MgmtOps over this process's engine."""

    def __init__(self, engine: EngineOps) -> None:
        self.engine = engine

    async def ended_runs(self) -> list[EngineRun]:
        """Every ended session workflow the engine keeps."""
        out = []
        for wf, status, ended_at in await self.engine.ended_workflows():
            session_id, generation = session_of_workflow(wf)
            out.append(EngineRun(wf, session_id, generation, status, ended_at))
        return out

    def runs_of(self, generations: dict[str, int]) -> list[str]:
        """Workflow ids of every generation of these sessions."""
        return [workflow_id(sid, g) for sid, last in generations.items() for g in range(last + 1)]

    async def history_size(self, workflow_ids: list[str]) -> HistoryRemoved:
        """What these runs hold in the engine."""
        runs, steps, size = await self.engine.workflow_history(workflow_ids)
        return HistoryRemoved(runs, steps, size)

    async def delete_runs(self, workflow_ids: list[str]) -> HistoryRemoved:
        """Delete these runs' history (ended ones only)."""
        size = await self.history_size(workflow_ids)
        deleted = await self.engine.delete_workflows(workflow_ids)
        if len(deleted) == size.runs:
            return size
        kept = await self.history_size([w for w in workflow_ids if w not in deleted])
        return HistoryRemoved(
            size.runs - kept.runs, size.steps - kept.steps, size.bytes - kept.bytes
        )

    async def terminate(self, session_id: str, reason: str) -> list[str]:
        """Cancel a session tree, as the operator (not as a step of the asking workflow)."""
        return await self.engine.outside_workflow(cancel_tree, session_id, reason)
