"""Serving the fleet's queue: its registration before DBOS's queue manager first looks,
and claims from it at once, within its limits, beside DBOS's queue thread."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa
from dbos import DBOS
from dbos._core import execute_dequeued_workflow
from dbos._utils import GlobalParams, generate_uuid

from swarmdeck.runtime.engine.workflow import REGISTER_WAIT_S, SESSIONS_QUEUE

log = logging.getLogger(__name__)


def launch_serving(register: Callable[[], None]) -> None:
    """DBOS.launch, with the fleet's queue registered before DBOS's queue manager first
    looks for queues.

    The manager (dbos._queue.queue_thread) lists the store's queues as it starts and then
    once a second (a fixed check interval), starting a worker thread for each new one. A
    queue registered after launch, as it must be on a fresh store (the tables and the row
    exist only once launch migrated them), was served only at the manager's next look: up
    to a second in which nothing on the fleet's queue started (a taken-over session, one
    beyond the prompt claim's limit). So the registration runs at the head of the
    manager's own thread, after migrations and before its first look. Where this DBOS
    names its manager otherwise, the queue is registered after launch, as before.
    """
    import dbos._dbos as dbos_module

    def register_off_loop() -> None:
        # DBOS refuses its blocking calls on a thread with a running loop, and launch may
        # be called from async code: register from a thread of its own.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(register).result()

    manager = getattr(dbos_module, "queue_thread", None)
    if manager is None:
        DBOS.launch()
        register_off_loop()
        return
    registered = threading.Event()
    failed: list[BaseException] = []

    def register_then_manage(stop_event: threading.Event, dbos: Any) -> None:
        try:
            register()
        except BaseException as exc:  # raised again by launch, on its caller's thread
            failed.append(exc)
        finally:
            registered.set()
        manager(stop_event, dbos)

    dbos_module.queue_thread = register_then_manage
    try:
        DBOS.launch()
    finally:
        dbos_module.queue_thread = manager
    if not registered.wait(REGISTER_WAIT_S):
        # The manager never started (a DBOS that launched no queue thread): as before.
        register_off_loop()
    if failed:
        raise failed[0]


class PromptClaims:
    """Claims from the fleet's queue at once, beside DBOS's queue thread, within the queue's
    per-worker and global concurrency.

    Both claim through DBOS's `start_queued_workflows`: the global limit it checks in the
    claim's own transaction; the per-worker one from the running count its caller passes.
    Two callers in one process could each pass a count that misses the other's claims (a
    claimed workflow counts as running only once it was dispatched), so every claim on the
    fleet's queue is wrapped here: under one lock, and counting the claims of the last
    second not yet seen running (over-counting only defers a claim to the next poll).

    Each claim is also bounded by this worker's fair share of the queue's work: the
    sessions waiting and running on it, divided by the live workers (`peers`), less those
    it runs. Without the bound the first worker to look (the one NOTIFY woke, whose prompt
    claim runs at once) took a whole burst up to its concurrency, and its peers, a poll
    later, found nothing: 3 sessions of 100 on one worker, 70 on another. Every worker
    computes the same share from the same counts, and the shares add up to at least the
    work, so some worker always has room while sessions wait; a session left waiting
    STALE_S (its share's worker full, or gone) is anyone's.
    """

    RECENT_S = 1.0
    # Whether this worker runs the application's latest version (which decides if it may
    # take version-less workflows) is asked at most this often, not at every claim: DBOS
    # builds and compiles a union of subqueries for it each time, which was most of a
    # claim's CPU (two workers polling every 50 ms: 1.7 s of 26 s of their GIL time). A
    # version registered since is seen this much later, as DBOS's queue thread already
    # does for a sharded store (once a poll).
    LATEST_VERSION_TTL_S = 5.0
    # The live workers are counted at most this often (a read of every worker row): one
    # that starts or dies is seen a second later, and its lease takes longer than that.
    PEERS_TTL_S = 1.0
    # A session still waiting this long after it was queued is anyone's: its peers had a
    # hundred polls to take their share, and a fleet whose workers differ in concurrency
    # (one full at its limit) must not leave sessions waiting beside a worker with room.
    STALE_S = 5.0
    # DBOS's queue thread reads the queue's row again at every poll (20 a second), in a
    # transaction, so that a change to its limits takes effect without a restart: 7 % of a
    # worker's time between messages on PostgreSQL, and SQLite's write lock each time. It
    # is read at most this often; a change is seen this much later.
    QUEUE_TTL_S = 1.0

    def __init__(self, dbos: Any, peers: Callable[[], int] | None = None) -> None:
        self.dbos = dbos
        self.sys_db = dbos._sys_db
        self._claim = self.sys_db.start_queued_workflows
        self._lock = threading.Lock()
        self._recent: dict[str, float] = {}
        self._latest: tuple[str, float, bool] | None = None
        self._peers = peers
        self._peer_count: tuple[float, int] | None = None
        self.sys_db.start_queued_workflows = self._locked_claim
        self._waiting_one: sa.Select[Any] | None = None
        self._get_queue = self.sys_db.get_queue
        self._queue_row: tuple[float, Any] | None = None
        self.sys_db.get_queue = self._read_queue

    def _read_queue(self, name: str, **kwargs: Any) -> Any:
        """The fleet queue's row as read at most QUEUE_TTL_S ago; any other queue's, now."""
        if name != SESSIONS_QUEUE or kwargs:
            return self._get_queue(name, **kwargs)
        now = time.monotonic()
        kept = self._queue_row
        if kept is None or now >= kept[0]:
            kept = self._queue_row = (now + self.QUEUE_TTL_S, self._get_queue(name))
        return kept[1]

    def _locked_claim(
        self,
        queue: Any,
        executor_id: str,
        app_version: str,
        partition_key: str | None,
        local_running_count: int = 0,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if queue.name != SESSIONS_QUEUE:
            return self._claim(
                queue, executor_id, app_version, partition_key, local_running_count, *args, **kwargs
            )
        with self._lock:
            if not self.sys_db.sharded and not self._any_waiting():
                # Nothing to claim: DBOS's claim transaction, 20 a second, is saved.
                return [], "worker_concurrency"
            # DBOS counted this process's running sessions for us (an O(sessions) walk of its
            # active set, on every poll); 0 may mean "not counted" (claim_now).
            running = self._running(local_running_count or None)
            room = self._fair_room(queue, executor_id, running)
            if room is not None:
                if room <= 0:
                    return [], "worker_concurrency"
                # DBOS claims up to its worker limit less the running count it is given.
                running = max(running, queue._worker_concurrency - room)
            if kwargs.get("is_latest_version") is None:
                kwargs["is_latest_version"] = self._is_latest(app_version)
            ids, reason = self._claim(
                queue, executor_id, app_version, partition_key, running, *args, **kwargs
            )
            now = time.monotonic()
            self._recent.update(dict.fromkeys(ids, now))
            return ids, reason

    def _fair_room(self, queue: Any, executor_id: str, running: int) -> int | None:
        """How many more sessions this worker may claim now: its fair share of the queue's
        work less what it runs (caller holds the lock); None when no bound applies (no
        peers, no worker limit to express it through, or a sharded store)."""
        if self._peers is None or queue._worker_concurrency is None or self.sys_db.sharded:
            return None
        now = time.monotonic()
        if self._peer_count is None or now > self._peer_count[0]:
            self._peer_count = (now + self.PEERS_TTL_S, max(1, self._peers()))
        peers = self._peer_count[1]
        if peers == 1:
            return None
        waiting, stale, started, mine = self._queue_counts(executor_id)
        if waiting == 0:
            return 0  # taken since the look for one: the claim's transaction is saved too
        # What the store says this worker runs counts too: a workflow claimed more than
        # RECENT_S ago that has not begun here yet is in neither count of _running.
        share = math.ceil((waiting + started) / peers) - max(running, mine)
        return max(share, stale)

    def _any_waiting(self) -> bool:
        """Whether any workflow waits on the fleet queue (ENQUEUED): asked first and alone
        (an index look), as the queue is mostly empty, DBOS's claim is a transaction, and
        the fair share counts the started workflows (every waiting session's)."""
        if self._waiting_one is None:
            # Built once: asked 20 times a second, a select built anew spent more CPU in
            # SQLAlchemy (its cache key) than the database spent answering it.
            ws = self.sys_db.tables.workflow_status
            self._waiting_one = (
                sa.select(ws.c.workflow_uuid)
                .where(ws.c.queue_name == SESSIONS_QUEUE, ws.c.status == "ENQUEUED")
                .limit(1)
            )
        with self.sys_db.engine.connect() as conn:
            return conn.execute(self._waiting_one).first() is not None

    def _queue_counts(self, executor_id: str) -> tuple[int, int, int, int]:
        """The fleet queue's workflows waiting (ENQUEUED), of them those waiting longer
        than STALE_S, those started (PENDING) on any worker, and on this one: in one
        statement, so that a claim by a peer between two reads is not counted twice
        (waiting in the first, started in the second)."""
        ws = self.sys_db.tables.workflow_status
        here = ws.c.executor_id == executor_id
        old = ws.c.updated_at < self.sys_db._now_ms_sql() - int(self.STALE_S * 1000)
        with self.sys_db.engine.connect() as conn:
            rows = conn.execute(
                sa.select(
                    ws.c.status, here, sa.func.count(), sa.func.sum(sa.case((old, 1), else_=0))
                )
                .where(ws.c.queue_name == SESSIONS_QUEUE, ws.c.status.in_(("ENQUEUED", "PENDING")))
                .group_by(ws.c.status, here)
            ).all()
        waiting = sum(n for status, _mine, n, _old in rows if status == "ENQUEUED")
        stale = sum(int(o or 0) for status, _mine, _n, o in rows if status == "ENQUEUED")
        started = sum(n for status, _mine, n, _old in rows if status == "PENDING")
        mine = sum(n for status, is_mine, n, _old in rows if status == "PENDING" and is_mine)
        return waiting, stale, started, mine

    def _is_latest(self, app_version: str) -> bool:
        """DBOS's latest-version answer, asked again after LATEST_VERSION_TTL_S (caller
        holds the lock)."""
        now = time.monotonic()
        if self._latest is None or self._latest[0] != app_version or now > self._latest[1]:
            latest = self.sys_db._is_latest_version(app_version)
            self._latest = (app_version, now + self.LATEST_VERSION_TTL_S, latest)
        return self._latest[2]

    def _running(self, counted: int | None = None) -> int:
        """This process's sessions on the fleet's queue (`counted`, when the caller has the
        count), with those claimed but not yet dispatched (caller holds the lock)."""
        active = self.dbos._active_workflows_set
        if self._recent:  # a worker holding thousands of waiting sessions polls 20 times a second
            now = time.monotonic()
            running_ids = set(active.activeList())
            self._recent = {
                wf: at
                for wf, at in self._recent.items()
                if now - at < self.RECENT_S and wf not in running_ids
            }
        if counted is None:
            counted = active.count_for_queue(SESSIONS_QUEUE)
        return counted + len(self._recent)

    def claim_now(self) -> int:
        """Claim what the fleet's queue holds, as far as its limits allow, and start it here;
        returns how many started. Left to the queue thread where the queue has partition
        limits or the store is sharded (DBOS's thread handles those)."""
        queue = self.sys_db.get_queue(SESSIONS_QUEUE)
        if queue is None or queue._has_partition_limits() or self.sys_db.sharded:
            return 0
        owner = generate_uuid()
        ids, _reason = self.sys_db.start_queued_workflows(
            queue, GlobalParams.executor_id, GlobalParams.app_version, None, 0, owner_xid=owner
        )
        if not ids:
            return 0
        found = {s["workflow_uuid"]: s for s in self.sys_db.get_workflow_statuses(ids)}
        for wf in ids:
            status = found.get(wf) or self.sys_db.get_workflow_status(wf)
            if status is None:
                log.warning("claimed workflow %s has no status; recovery will find it", wf)
                continue
            execute_dequeued_workflow(self.dbos, status, owner)
        return len(ids)
