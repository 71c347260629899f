"""The counted set of running workflows answers as DBOS's own walk does, whatever the
order executions come and go (a workflow run twice here, on two queues, or on none), and
names the newest generation of each session running here as a walk would."""

from __future__ import annotations

from dbos._core import ActiveWorkflowById
from hypothesis import given
from hypothesis import strategies as st

from swarmdeck.runtime.engine.active_counts import CountedActiveWorkflows, count_active_workflows
from swarmdeck.runtime.workflow_ids import session_of_workflow

QUEUES = [None, "sessions", "internal"]
# Workflows of two sessions' generations (s1's 0 to 2, s2's 0 and 3).
KEYS = ["s1", "s1~g1", "s1~g2", "s2", "s2~g3", "s3~g1"]
# Each step: add an execution of workflow k on queue q (partition p), or release the i-th
# live entry.
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.integers(0, 5),
            st.sampled_from(QUEUES),
            st.sampled_from([None, "p1"]),
        ),
        st.tuples(st.just("release"), st.integers(0, 50)),
    ),
    max_size=60,
)


@given(steps)
def test_counts_match_dbos_walk(plan: list[tuple]) -> None:
    counted, walked = CountedActiveWorkflows(), ActiveWorkflowById()
    entries: list[tuple] = []
    for step in plan:
        if step[0] == "add":
            _, k, queue, partition = step
            entries.append(
                (
                    counted.add(KEYS[k], queue, partition),
                    walked.add(KEYS[k], queue, partition),
                )
            )
        elif entries:
            mine, theirs = entries.pop(step[1] % len(entries))
            mine.release()
            mine.release()  # idempotent, as DBOS's entries are
            theirs.release()
        for queue in QUEUES[1:]:
            assert counted.count_for_queue(queue) == walked.count_for_queue(queue)
        assert sorted(counted.activeList()) == sorted(walked.activeList())
        for key in KEYS:
            assert counted.runs(key) == (key in walked.activeList())
        for session_id in ("s1", "s2", "s3", "s4"):
            generations = [
                session_of_workflow(k)[1]
                for k in walked.activeList()
                if session_of_workflow(k)[0] == session_id
            ]
            assert counted.newest_generation(session_id) == max(generations, default=None)


def test_a_dbos_whose_set_is_not_the_one_known_keeps_its_own() -> None:
    class Other(ActiveWorkflowById):
        pass

    dbos = type("FakeDBOS", (), {})()
    dbos._active_workflows_set = Other()
    assert count_active_workflows(dbos) is None
    assert type(dbos._active_workflows_set) is Other
    dbos._active_workflows_set = ActiveWorkflowById()
    assert isinstance(count_active_workflows(dbos), CountedActiveWorkflows)
