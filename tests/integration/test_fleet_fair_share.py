"""A worker claims at most its fair share of a burst on the fleet's queue: the work waiting
and running, divided by the live workers. The first worker to look took the whole burst
before (3 of 100 sessions on one worker, 70 on another), its peers finding nothing. What
its peers leave waiting past STALE_S is anyone's.

One worker runs in this process; its peers are live rows in sd_workers (their leases
held), so the share it may take is known exactly. Both stores.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.config import load_settings
from swarmdeck.runtime.engine import Engine
from swarmdeck.runtime.engine.claims import PromptClaims
from swarmdeck.runtime.engine.workflow import SESSIONS_QUEUE, dbos_instance
from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import Store, write_provider
from tests.integration.test_sessions_support import Agent, Scripted, text, wait_for

BURST = 30
PEERS = ("peer-b", "peer-c")


def claimed_by(engine: Engine) -> dict[str, int]:
    """The fleet queue's workflows by status: those this engine claimed (PENDING) and those
    still waiting (ENQUEUED)."""
    sys_db = dbos_instance()._sys_db
    ws = sys_db.tables.workflow_status
    with sys_db.engine.connect() as conn:
        rows = conn.execute(
            sa.select(ws.c.status, ws.c.executor_id, sa.func.count())
            .where(ws.c.queue_name == SESSIONS_QUEUE)
            .group_by(ws.c.status, ws.c.executor_id)
        ).all()
    mine = sum(n for status, ex, n in rows if status == "PENDING" and ex == engine.executor_id)
    waiting = sum(n for status, _ex, n in rows if status == "ENQUEUED")
    return {"mine": mine, "waiting": waiting}


def burst(submitter: Host, workdir: Path, task: str) -> None:
    """BURST sessions handed to the fleet in one transaction."""
    batch = [SessionRequest(f"{task} {i}", "fake", workdir) for i in range(BURST)]
    submitter.create_sessions(batch, fleet=True)


def test_a_worker_claims_its_share_of_a_burst_and_the_rest_once_its_peers_are_gone(
    store: Store, sd_home: Path, workdir: Path, fake_llm, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    gate = threading.Event()

    def held(req: FakeRequest) -> Reply:
        gate.wait(60)
        return text("done")

    script = Scripted({"job": Agent([held]), "more": Agent([held])})
    fake_llm.set_script(script)
    monkeypatch.setattr(PromptClaims, "PEERS_TTL_S", 0.1)
    monkeypatch.setattr(PromptClaims, "STALE_S", 600.0)
    settings = dataclasses.replace(load_settings(), lease_seconds=120.0)
    worker = Host(settings, role="worker")
    engine = worker.launch()
    peers = WorkerRegistry(worker.catalog.engine, settings.hostname, settings.lease_seconds)
    for name in PEERS:
        peers.register(name, role="worker")
    try:
        submitter = Host()
        burst(submitter, workdir, "job")
        assert len(engine.take_handovers()) == BURST
        share = BURST // (len(PEERS) + 1)
        wait_for(lambda: claimed_by(engine)["mine"] >= share, timeout=30, what="its share")
        # DBOS's queue thread polls every 50 ms beside the prompt claim, and a claim counts
        # as running here only once it began: a second of polls takes no more.
        time.sleep(1.5)
        assert claimed_by(engine) == {"mine": share, "waiting": BURST - share}
        # Its peers stop without taking anything: the whole burst is this worker's share.
        for name in PEERS:
            peers.stop(name, left_work=False)
        wait_for(
            lambda: claimed_by(engine) == {"mine": BURST, "waiting": 0},
            timeout=30,
            what="the rest of the burst",
        )
        # Two live peers again and a second burst: this worker holds more than its share
        # (30 of 60 / 3) and takes none, until the sessions have waited STALE_S.
        for name in PEERS:
            peers.register(f"{name}-2", role="worker")
        # The worker counted itself alone a moment ago, and keeps a count PEERS_TTL_S: the
        # burst must come after that count lapses, as it would for peers that start later.
        time.sleep(5 * PromptClaims.PEERS_TTL_S)
        burst(submitter, workdir, "more")
        assert len(engine.take_handovers()) == BURST
        time.sleep(1.5)
        assert claimed_by(engine) == {"mine": BURST, "waiting": BURST}
        monkeypatch.setattr(PromptClaims, "STALE_S", 1.0)
        wait_for(
            lambda: claimed_by(engine) == {"mine": 2 * BURST, "waiting": 0},
            timeout=30,
            what="the sessions left waiting",
        )
        # Every claimed session began here before the engine stops (one claimed a moment
        # before would have its start dropped with the engine's loop).
        active = dbos_instance()._active_workflows_set
        wait_for(lambda: active.count_for_queue(SESSIONS_QUEUE) == 2 * BURST, timeout=30)
    finally:
        gate.set()
        worker.shutdown()


def test_a_serving_worker_reads_the_queue_s_row_once_a_second_and_sees_a_change(
    store: Store, sd_home: Path
) -> None:
    """DBOS's queue thread reloads the fleet queue's row at every 50 ms poll; a worker
    reads it at most once a second, and still sees a change to its limits within one."""
    reads: list[float] = []

    def seen(_conn, _cursor, statement: str, *_args) -> None:  # type: ignore[no-untyped-def]
        # The queue's own row (DBOS's queue manager also lists every queue once a second).
        if statement.lstrip().upper().startswith("SELECT") and "queues.name =" in statement:
            reads.append(time.monotonic())

    worker = Host(role="worker")
    worker.launch()
    sys_db = dbos_instance()._sys_db
    sa.event.listen(sa.Engine, "before_cursor_execute", seen)
    try:
        time.sleep(2.5)
        assert 1 <= len(reads) <= 4, reads  # 50 polls, without the cache
        sys_db.update_queue(SESSIONS_QUEUE, {"worker_concurrency": 7})
        wait_for(
            lambda: sys_db.get_queue(SESSIONS_QUEUE)._worker_concurrency == 7,
            timeout=1 + 2 * PromptClaims.QUEUE_TTL_S,
            what="the queue's new limit",
        )
    finally:
        sa.event.remove(sa.Engine, "before_cursor_execute", seen)
        worker.shutdown()
