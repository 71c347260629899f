"""DBOS's set of the workflows running in this process, with each queue's count kept as
workflows come and go instead of counted by a walk of the whole set at every ask, and
each session's generations running here (whose doorbell a message rings)."""

from __future__ import annotations

import collections
from typing import Any

from dbos._core import ActiveWorkflowById, ActiveWorkflowEntry

from swarmdeck.runtime.workflow_ids import session_of_workflow


class CountedActiveWorkflows(ActiveWorkflowById):
    """ActiveWorkflowById whose count_for_queue is a lookup.

    DBOS's queue thread asks for its queue's count at every poll, 20 times a second, and
    DBOS counts by walking every execution this process runs: a worker holding thousands
    of resting sessions spent a tenth of its CPU on those walks. The count moves here
    under the set's own lock, in the same critical section as the set, so it is never
    seen out of step with it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._per_queue: collections.Counter[str] = collections.Counter()
        # Session id -> its generations whose workflows run here, with their executions.
        self._generations: dict[str, collections.Counter[int]] = {}

    def add(
        self, key: str, queue_name: str | None = None, queue_partition_key: str | None = None
    ) -> ActiveWorkflowEntry:
        """Register one execution of `key` (as DBOS does), counting it for its queue."""
        bucket = (queue_name, queue_partition_key) if queue_name is not None else None
        session_id, generation = session_of_workflow(key)
        with self._lock:
            self._m.setdefault(key, []).append(bucket)
            if bucket is not None:
                self._per_queue[bucket[0]] += 1
            self._generations.setdefault(session_id, collections.Counter())[generation] += 1
        return ActiveWorkflowEntry(self, key, bucket)

    def _remove(self, key: str, bucket: Any) -> None:
        with self._lock:
            buckets = self._m[key]
            buckets.remove(bucket)
            if not buckets:
                del self._m[key]
            if bucket is not None:
                self._per_queue[bucket[0]] -= 1
            session_id, generation = session_of_workflow(key)
            running = self._generations[session_id]
            running[generation] -= 1
            if not running[generation]:
                del running[generation]
            if not running:
                del self._generations[session_id]

    def count_for_queue(self, queue_name: str) -> int:
        """How many executions of this queue's workflows run here, across its partitions."""
        with self._lock:
            return self._per_queue[queue_name]

    def runs(self, key: str) -> bool:
        """Whether an execution of this workflow runs in this process."""
        with self._lock:
            return key in self._m

    def newest_generation(self, session_id: str) -> int | None:
        """The newest generation of the session whose workflow runs in this process (None:
        none does). A generation that rolls over starts the next here, and DBOS registers
        it before it runs a line: this is the generation a message must ring, the one
        before it only finishing."""
        with self._lock:
            running = self._generations.get(session_id)
            return max(running) if running else None


def count_active_workflows(dbos: Any) -> CountedActiveWorkflows | None:
    """Give a DBOS instance, before it launches, the counted set; None (and DBOS's own set
    kept) where this DBOS's set is not the class this one was written against."""
    current = getattr(dbos, "_active_workflows_set", None)
    if type(current) is not ActiveWorkflowById or current.activeList():
        return None
    counted = CountedActiveWorkflows()
    dbos._active_workflows_set = counted
    return counted
