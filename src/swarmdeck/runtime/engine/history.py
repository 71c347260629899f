"""What the maintenance tools prune of DBOS's workflow history (the Engine's EngineOps
part), and running engine calls outside the calling workflow."""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Awaitable, Callable
from typing import Any

from dbos import DBOS

from swarmdeck.runtime.engine.workflow import ENDED_WORKFLOW_STATUSES, SESSION_WORKFLOW


class WorkflowHistory:
    """The Engine's calls on DBOS's record of ended workflows."""

    async def outside_workflow(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run `fn` as this process rather than as part of the calling workflow.

        DBOS records its own calls made in a workflow's context as steps of that workflow.
        A tool's engine calls must not be: the tool call is journaled in the catalog, so a
        replay skips it, and a recorded DBOS step it left behind would shift every later one.
        """
        task = asyncio.get_running_loop().create_task(fn(*args), context=contextvars.Context())
        return await task

    async def ended_workflows(self) -> list[tuple[str, str, float]]:
        """(workflow id, status, ended at) of every ended session workflow DBOS keeps."""

        async def listing() -> list[Any]:
            return await DBOS.list_workflows_async(
                name=SESSION_WORKFLOW,
                status=ENDED_WORKFLOW_STATUSES,
                load_input=False,
                load_output=False,
            )

        found = await self.outside_workflow(listing)
        return [(w.workflow_id, w.status, (w.updated_at or 0) / 1000.0) for w in found]

    async def workflow_history(self, workflow_ids: list[str]) -> tuple[int, int, int]:
        """(runs, steps, bytes of their recorded outputs) of these workflows."""

        async def measure() -> tuple[int, int, int]:
            runs = steps = size = 0
            for wf in workflow_ids:
                if await DBOS.get_workflow_status_async(wf) is None:
                    continue
                recorded = await DBOS.list_workflow_steps_async(wf)
                runs += 1
                steps += len(recorded)
                size += sum(len(json.dumps(s.get("output"), default=str)) for s in recorded)
            return runs, steps, size

        return await self.outside_workflow(measure)

    async def delete_workflows(self, workflow_ids: list[str]) -> list[str]:
        """Delete the history of those of these workflows that have ended (a workflow still
        pending is left alone); returns the ids deleted."""

        async def delete() -> list[str]:
            found = await DBOS.list_workflows_async(
                workflow_ids=workflow_ids, load_input=False, load_output=False
            )
            ended = [w.workflow_id for w in found if w.status in ENDED_WORKFLOW_STATUSES]
            if ended:
                await DBOS.delete_workflows_async(ended)
            return ended

        return await self.outside_workflow(delete) if workflow_ids else []
