"""The DBOS seam: the only module that imports DBOS. Everything else speaks in sessions.

The fleet stands on DBOS's queues in the shared store: a session handed to the fleet is
enqueued on SESSIONS_QUEUE, and every worker process dequeues from it within the queue's
per-worker and global concurrency. Two pieces DBOS lacks are added beside it, here:

- takeover across hosts. Open-source DBOS recovers a dead process's workflows only when a
  process with the same executor id starts again. Here each executor holds a lease (its
  heartbeat row, catalog/workers.py); a live worker claims a lapsed one and puts the dead
  executor's unfinished workflows back on SESSIONS_QUEUE, where any live worker takes
  them. (DBOS's own recovery call would use its internal queue, which polls once a second
  and which every DBOS process, a short `swarmdeck run` too, dequeues from.)
- a prompt start. DBOS's queue thread polls (queue_poll_seconds); a worker that claims a
  session handed to it enqueues it and then claims from the queue at once itself, through
  DBOS's own claim, so the queue's limits hold and the session does not wait for the poll
  (see _PromptClaims).
- fencing. A worker that was only paused comes back still running its sessions. DBOS
  already refuses its engine steps (each execution owns its workflow by a token); the
  session's own journal lives in the catalog, where each execution writes under an epoch
  it took as it started (catalog/fence.py), so its turns, tool results and end are refused
  too, and it stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSClient, DBOSConfig, SetWorkflowID
from dbos._core import execute_dequeued_workflow, prepare_enqueued_workflow
from dbos._utils import INTERNAL_QUEUE_NAME, GlobalParams, generate_uuid

from swarmdeck.catalog import schema
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.config import Settings
from swarmdeck.runtime.durable import ROLLED_OVER, SUPERSEDED, SessionRunner
from swarmdeck.runtime.services import Services, services, set_services
from swarmdeck.runtime.workflow_ids import workflow_id

log = logging.getLogger(__name__)

APP_NAME = "swarmdeck"
# DBOS recovers and dequeues only the workflows of its own application version. Named
# after the package version, every upgrade stranded the sessions in flight: a permanent
# system agent or a cron session waits for months, so "drain the fleet first" is no answer.
# So the version names the session workflow's format instead: its engine steps (Durable's
# calls, in order, and what each returns). A release that keeps them replays every waiting
# session after an upgrade; one that changes them must change this name, and
# tests/integration/test_workflow_format.py fails until it does. Format 1 keeps the name the first
# release gave it, so that release's stores keep their sessions.
APP_VERSION = "swarmdeck-0.1.0"
# The fleet's queue of sessions (DBOS reserves names starting with `_dbos_`).
SESSIONS_QUEUE = "swarmdeck_sessions"
# Waiting on a workflow that runs elsewhere polls the store; DBOS's default is 1 s, which
# added up to a second to every run's end.
RESULT_POLL_SECONDS = 0.05
ROLES = ("worker", "local")
# The shortest timeout of a recv whose deadline has passed: it still takes its place.
MIN_RECV_SECONDS = 0.001
# Waiting workflows looked up per statement of the SQLite message poll (a statement takes
# at most 32,766 parameters).
POLL_BATCH = 500
SESSION_WORKFLOW = "swarmdeck.session"
# How long launch waits for DBOS's queue manager to register the fleet's queue.
REGISTER_WAIT_S = 30.0
ENDED_WORKFLOW_STATUSES = ["SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"]


class _ExpectedWarnings(logging.Filter):
    """Drops DBOS's warnings for what swarmdeck does on purpose.

    - A cancelled task: a process that stops (or a run that ends while sessions idle)
      cancels its sessions' workflows; they stay resumable, and the warning only alarmed
      users (on `sessions resume`, in the quickstart).
    - A taken-over execution parks with one warning per session; the worker says once, in
      its own words, that it lost its lease (see Engine.on_lease_lost).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            message.startswith("Asyncio task cancelled")
            or "no longer owned by this execution" in message
        )


_EXPECTED_WARNINGS = _ExpectedWarnings()


def quiet_expected_warnings() -> None:
    """Install the filter on DBOS's logger (once; DBOS keeps its own handlers)."""
    dbos_log = logging.getLogger("dbos")
    if _EXPECTED_WARNINGS not in dbos_log.filters:
        dbos_log.addFilter(_EXPECTED_WARNINGS)


class _DBOSDurable:
    """The Durable protocol on DBOS primitives."""

    async def step(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        if not inspect.iscoroutinefunction(fn):
            fn = _off_loop(fn)
        return await DBOS.run_step_async({"name": name}, fn, *args)

    async def sleep(self, seconds: float) -> None:
        await DBOS.sleep_async(seconds)

    async def recv(self, topic: str, timeout_s: float) -> Any:
        return await DBOS.recv_async(topic, timeout_s)

    async def recv_until(self, topic: str, deadline: float) -> Any:
        # DBOS records the timeout's end as it first runs this recv and a replay keeps that
        # record, ignoring the timeout given: reading the clock here is replay-safe. Always
        # a positive timeout: a replayed wait must take its place in the log.
        return await DBOS.recv_async(topic, max(MIN_RECV_SECONDS, deadline - time.time()))

    async def now(self) -> float:
        return await DBOS.run_step_async({"name": "now"}, _wall_clock)

    async def start_child(self, session_id: str) -> None:
        with SetWorkflowID(workflow_id(session_id, 0)):
            await DBOS.start_workflow_async(session_workflow, session_id, 0)

    async def send(self, session_id: str, message: Any, topic: str) -> None:
        generation = await _generation(services(), session_id)
        await DBOS.send_async(workflow_id(session_id, generation), message, topic)

    async def restart_as_new(self, session_id: str, generation: int) -> None:
        nxt = await self.step("next_generation", _advance_generation, session_id, generation)
        with SetWorkflowID(workflow_id(session_id, nxt)):
            await DBOS.start_workflow_async(session_workflow, session_id, nxt)


async def _generation(svc: Services, session_id: str) -> int:
    """The session's current generation (read off the loop: on PostgreSQL a read is a
    network round trip)."""
    return (await run_in_thread(svc.catalog.get_session, session_id)).generation


def _advance_generation(session_id: str, current: int) -> int:
    return services().catalog.advance_generation(session_id, current)


def _off_loop(fn: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """A plain step function runs in a worker thread: it waits on the database, and a wait
    on the loop (SQLite's busy handler sleeps) would stall every session of the process."""

    async def run(*args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)

    run.__name__ = getattr(fn, "__name__", "step")
    return run


async def _wall_clock() -> float:
    return time.time()


# What a session workflow runs: the session loop, which the host gives the engine (the
# engine knows nothing of sessions). One per process, as DBOS's workflow registry is.
_runner: SessionRunner | None = None


@DBOS.workflow(name=SESSION_WORKFLOW)
async def session_workflow(session_id: str, generation: int) -> dict[str, Any]:
    """One generation of a session, durably."""
    if _runner is None:
        raise RuntimeError("no session runner: the engine was launched without one")
    return await _runner(session_id, generation, _DBOSDurable())


def _sqlite_listener(sys_db: Any) -> None:
    """DBOS's notification poller on SQLite, with one statement a pass for every waiting
    `recv` instead of one transaction each.

    DBOS's own poller checks each waiter in a transaction of its own, every poll (50 ms
    here): 1,000 sessions in a `wait` were 20,000 write transactions a second (our SQLite
    connections begin IMMEDIATE), which held the write lock from every session's own
    writes. One read a pass finds every unconsumed message for the waiters and wakes
    theirs; the recv itself still consumes it, as before. Workflow events and streams
    (which swarmdeck does not wait on) are left to the per-entry check.
    """
    notifications = sys_db.tables.notifications
    interval = sys_db._notification_listener_polling_interval_sec
    while sys_db._run_background_processes:
        time.sleep(interval)
        try:
            waiters = sys_db.notifications_map.snapshot()
            if waiters:
                destinations = sorted({components[0] for _, components, _ in waiters})
                found: set[tuple[str, str]] = set()
                with sys_db.engine.connect() as conn:  # a read: no write lock
                    for at in range(0, len(destinations), POLL_BATCH):
                        found.update(
                            (row[0], row[1])
                            for row in conn.execute(
                                sa.select(notifications.c.destination_uuid, notifications.c.topic)
                                .where(
                                    notifications.c.destination_uuid.in_(
                                        destinations[at : at + POLL_BATCH]
                                    ),
                                    notifications.c.consumed == False,  # noqa: E712
                                )
                                .distinct()
                            )
                        )
                for _, (destination, topic, _key), signal in waiters:
                    if (destination, topic) in found:
                        signal.set()
            _poll_each(sys_db, sys_db.workflow_events_map, sys_db.tables.workflow_events)
            _poll_each(sys_db, sys_db.streams_map, sys_db.tables.streams)
        except Exception as exc:
            if sys_db._run_background_processes:
                logging.getLogger("dbos").warning("notification poller error: %s", exc)
                time.sleep(interval)


def _poll_each(sys_db: Any, waiting: Any, table: Any) -> None:
    """DBOS's own check, waiter by waiter, of a map of waiters keyed by (workflow, key)."""
    for _, (wf_id, key, shard), signal in waiting.snapshot():
        with sys_db.engine.connect() as conn:
            where = [*sys_db._wf(table, wf_id, shard_key=shard), table.c.key == key]
            if conn.execute(sa.select(sa.literal(1)).where(*where).limit(1)).first():
                signal.set()


def install_sqlite_listener() -> bool:
    """Put _sqlite_listener in place of DBOS's SQLite poller (before DBOS launches);
    False, leaving DBOS's own, when this DBOS lacks what it relies on."""
    try:
        from dbos._sys_db_sqlite import SQLiteSystemDatabase
    except ImportError:
        return False
    if "_notification_listener" not in vars(SQLiteSystemDatabase) or not hasattr(
        SQLiteSystemDatabase, "_wf"
    ):
        return False
    SQLiteSystemDatabase._notification_listener = _sqlite_listener  # type: ignore[method-assign]
    return True


def _launch_serving(register: Callable[[], None]) -> None:
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


class _PromptClaims:
    """Claims from the fleet's queue at once, beside DBOS's queue thread, within the queue's
    per-worker and global concurrency.

    Both claim through DBOS's `start_queued_workflows`: the global limit it checks in the
    claim's own transaction; the per-worker one from the running count its caller passes.
    Two callers in one process could each pass a count that misses the other's claims (a
    claimed workflow counts as running only once it was dispatched), so every claim on the
    fleet's queue is wrapped here: under one lock, and counting the claims of the last
    second not yet seen running (over-counting only defers a claim to the next poll).
    """

    RECENT_S = 1.0
    # Whether this worker runs the application's latest version (which decides if it may
    # take version-less workflows) is asked at most this often, not at every claim: DBOS
    # builds and compiles a union of subqueries for it each time, which was most of a
    # claim's CPU (two workers polling every 50 ms: 1.7 s of 26 s of their GIL time). A
    # version registered since is seen this much later, as DBOS's queue thread already
    # does for a sharded store (once a poll).
    LATEST_VERSION_TTL_S = 5.0

    def __init__(self, dbos: Any) -> None:
        self.dbos = dbos
        self.sys_db = dbos._sys_db
        self._claim = self.sys_db.start_queued_workflows
        self._lock = threading.Lock()
        self._recent: dict[str, float] = {}
        self._latest: tuple[str, float, bool] | None = None
        self.sys_db.start_queued_workflows = self._locked_claim

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
            running = max(local_running_count, self._running())
            if kwargs.get("is_latest_version") is None:
                kwargs["is_latest_version"] = self._is_latest(app_version)
            ids, reason = self._claim(
                queue, executor_id, app_version, partition_key, running, *args, **kwargs
            )
            now = time.monotonic()
            self._recent.update(dict.fromkeys(ids, now))
            return ids, reason

    def _is_latest(self, app_version: str) -> bool:
        """DBOS's latest-version answer, asked again after LATEST_VERSION_TTL_S (caller
        holds the lock)."""
        now = time.monotonic()
        if self._latest is None or self._latest[0] != app_version or now > self._latest[1]:
            latest = self.sys_db._is_latest_version(app_version)
            self._latest = (app_version, now + self.LATEST_VERSION_TTL_S, latest)
        return self._latest[2]

    def _running(self) -> int:
        """This process's sessions on the fleet's queue, with those claimed but not yet
        dispatched (caller holds the lock)."""
        active = self.dbos._active_workflows_set
        now = time.monotonic()
        running_ids = set(active.activeList())
        self._recent = {
            wf: at
            for wf, at in self._recent.items()
            if now - at < self.RECENT_S and wf not in running_ids
        }
        return active.count_for_queue(SESSIONS_QUEUE) + len(self._recent)

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


def new_executor_id(hostname: str) -> str:
    """A unique executor id per process (two processes sharing one ran a step twice)."""
    return f"{hostname}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _dbos_config(settings: Settings, services: Services, executor_id: str) -> DBOSConfig:
    config: DBOSConfig = {
        "name": APP_NAME,
        "system_database_url": settings.store_url,
        "executor_id": executor_id,
        "application_version": APP_VERSION,
        "max_executor_threads": settings.max_executor_threads,
        "notification_listener_polling_interval_sec": settings.recv_poll_seconds,
        "log_level": os.environ.get("SWARMDECK_DBOS_LOG", "WARNING"),
    }
    if settings.is_sqlite:
        # Share the catalog's engine: WAL + synchronous=NORMAL, as DBOS-NOTES measured.
        config["system_database_engine"] = services.catalog.engine
    else:
        # Pre-ping costs ~10 % per step on PostgreSQL (DBOS-NOTES); a dead connection is
        # replaced on error anyway.
        config["db_engine_kwargs"] = {"pool_pre_ping": False}
    return config


class Engine:
    """A launched DBOS runtime in this process, registered as a live executor.

    `role` "worker" is a fleet worker: others hand it sessions. `serve_queue` makes this
    process dequeue from the fleet's queue (a worker, `sessions resume`, the SDK); a one-off
    run does not, so it never picks up work that would outlive it.
    """

    def __init__(
        self,
        services: Services,
        runner: SessionRunner,
        role: str = "local",
        serve_queue: bool = False,
    ) -> None:
        assert role in ROLES, role
        self.runner = runner
        settings = services.settings
        self.services = services
        self.role = role
        self.serve_queue = serve_queue or role == "worker"
        self.executor_id = new_executor_id(settings.hostname)
        self.workers = WorkerRegistry(
            services.catalog.engine, settings.hostname, settings.lease_seconds
        )
        self.lease_lost = threading.Event()
        # Called (in the heartbeat thread) once the lease was found lost.
        self.on_lease_lost: Callable[[], None] | None = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._launched = False
        # Handles of workflows started by this process: awaiting them needs no polling.
        self._handles: dict[str, Any] = {}
        self._prompt: _PromptClaims | None = None
        # Executors whose sessions this process took over.
        self._taken_over: list[str] = []

    def register(self) -> None:
        """Take this process's lease (once): register as a live executor and keep the lease
        renewed. Whatever this process creates from then on is answerable to it, so a
        worker takes it over should the process die, even before the engine launched."""
        if self._heartbeat is not None:
            return
        kind = reason = None
        if self.serve_queue:
            # Sessions handed to the fleet may run here: a dispatch reports this sandbox.
            from swarmdeck.tools.sandbox import sandbox_in_force

            found = sandbox_in_force(self.services.settings.no_sandbox)
            kind, reason = found.kind, found.reason
        self.workers.register(self.executor_id, self.role, kind, reason)
        self._heartbeat = threading.Thread(
            target=_beat, args=(weakref.ref(self),), name="sd-heartbeat", daemon=True
        )
        self._heartbeat.start()

    def launch(self) -> None:
        """Take the lease, start DBOS (and, serving, the fleet's queue)."""
        global _runner
        settings = self.services.settings
        _runner = self.runner
        self.services.engine_ops = self
        self.services.limiter.set_owner(self.executor_id)
        set_services(self.services)
        self.register()
        quiet_expected_warnings()
        if settings.is_sqlite:
            install_sqlite_listener()
        DBOS(config=_dbos_config(settings, self.services, self.executor_id))
        if not self.serve_queue:
            DBOS.listen_queues([])
            DBOS.launch()
        else:
            _launch_serving(self._register_queue)
        self._launched = True
        if self.serve_queue:
            self._prompt = _PromptClaims(_dbos())
        # Slots a crashed worker held (mid-call, or kept between calls) are free again now,
        # whether or not this process takes over its sessions.
        self.services.limiter.free_slots_of(self.workers.crashed())

    def _register_queue(self) -> None:
        """Register the fleet's queue with this worker's limits (DBOS launched)."""
        settings = self.services.settings
        DBOS.register_queue(
            SESSIONS_QUEUE,
            worker_concurrency=settings.worker_concurrency,
            global_concurrency=settings.queue_concurrency,
            polling_interval_sec=settings.queue_poll_seconds,
            # The queue's limits are the store's: the last worker to start sets them; a
            # process that only lends a hand keeps what the fleet set.
            on_conflict="always_update" if self.role == "worker" else "never_update",
        )

    def _left_work(self) -> bool:
        """Whether this executor leaves unfinished workflows or sessions it was to start
        (when the store cannot say, it does: a needless takeover costs a query, a missed
        one a session)."""
        sessions = schema.sessions
        left = [
            sa.exists().where(
                sessions.c.status == "pending", sessions.c.executor == self.executor_id
            )
        ]
        try:
            store = self.services.catalog.engine
            if self._launched:
                # DBOS's tables are in the same database (in a schema of their own on
                # PostgreSQL): one query asks both, where the catalog's read and DBOS's
                # get_pending_workflows were two round trips. On DBOS's engine, which
                # names its schema (the catalog's tables are on the default path).
                sys_db = _dbos()._sys_db
                left.append(sa.exists().where(*_pending_workflows(sys_db, [self.executor_id])))
                store = sys_db.engine
            with store.connect() as conn:
                return bool(conn.execute(sa.select(sa.or_(*left))).scalar())
        except Exception:
            log.warning("could not tell whether this process left work; leaving it claimable")
            return True

    @property
    def launched(self) -> bool:
        """True once DBOS runs in this process."""
        return self._launched

    def _lost_lease(self) -> None:
        self.lease_lost.set()
        if self.on_lease_lost is not None:
            self.on_lease_lost()

    def shutdown(self) -> None:
        """Stop cleanly; sessions still running become claimable by the next worker."""
        self._stop.set()
        try:
            if self._heartbeat is not None:
                self.workers.stop(self.executor_id, left_work=self._left_work())
        finally:
            if self._launched:
                DBOS.destroy(workflow_completion_timeout_sec=0)
                self._launched = False
            set_services(None)

    # -- takeover ----------------------------------------------------------------------

    def recover_dead_workers(self) -> list[str]:
        """Take over the unfinished sessions of executors that died or stopped: their
        workflows go back on the fleet's queue, and the sessions they were to start but
        never did are started. Returns the executor ids taken over."""
        claimed = self.workers.claim_dead(self.executor_id)
        if claimed:
            # A dead worker's provider slots would stay taken until their leases ran out
            # (the call timeout plus a margin): free them now.
            self.services.limiter.free_slots_of(claimed)
            self.requeue_work_of(claimed)
            self._taken_over.extend(claimed)
        return claimed

    def resuming(self) -> bool:
        """Whether sessions this process took over have yet to begin their new execution."""
        return bool(self._taken_over) and self.services.catalog.still_held_by(self._taken_over)

    def requeue_work_of(self, executors: list[str]) -> int:
        """Put these dead executors' unfinished workflows back on a queue, and enqueue the
        sessions they were to start; idempotent. Returns how many moved.

        A process serving the fleet's queue puts them there; one that does not (the SDK
        taking over in a script) on DBOS's own queue, which every engine polls, itself too.
        (A workflow that came from a queue goes back to that queue either way.)"""
        dbos = _dbos()
        queue = SESSIONS_QUEUE if self.serve_queue else INTERNAL_QUEUE_NAME
        moved = 0
        # One statement for all of them: a transaction per workflow (DBOS's own call) took
        # 1.8 s for 100 sessions on a restart, while those already back on the queue
        # competed with it. Only rows still PENDING under the dead executors move: a
        # duplicate request, or one racing a live worker that took it, changes nothing.
        moved += _reenqueue_all(dbos._sys_db, executors, queue)
        # Killed between writing the session and starting it: nobody else will.
        pending = self.services.catalog.pending_of(executors)
        moved += self._enqueue_all([(r.id, r.generation) for r in pending], queue)
        if moved and self._prompt is not None:
            # As for a hand-over: start what this worker may take now, not at the next poll.
            self._prompt.claim_now()
        return moved

    def _enqueue_all(self, sessions: list[tuple[str, int]], queue: str = SESSIONS_QUEUE) -> int:
        """Enqueue each (session, generation)'s workflow unless one exists, in one
        transaction; returns how many were enqueued. One DBOS enqueue each was two
        transactions a session, and a worker taking a hundred handed-over sessions while
        running others waited ~50 ms on the store's write lock for each."""
        if not sessions:
            return 0
        dbos = _dbos()
        statuses = [
            prepare_enqueued_workflow(
                dbos,
                session_workflow,
                (sid, generation),
                {},
                queue_name=queue,
                workflow_id=workflow_id(sid, generation),
            )
            for sid, generation in sessions
        ]
        return len(dbos._sys_db.init_workflows(statuses))

    def take_handovers(self, limit: int = 100) -> list[str]:
        """Claim sessions handed to the fleet and enqueue them, then claim from the queue at
        once rather than at DBOS's next poll; returns their ids."""
        taken = self.services.catalog.take_handover(self.executor_id, limit)
        self._enqueue_all(taken)
        if taken and self._prompt is not None:
            self._prompt.claim_now()
        return [sid for sid, _generation in taken]

    # -- sessions ----------------------------------------------------------------------

    async def current_workflow(self, session_id: str) -> str:
        """The workflow id of the session's current generation."""
        return workflow_id(session_id, await _generation(self.services, session_id))

    async def start_session(self, session_id: str) -> None:
        """Start the current generation's workflow unless it exists; an existing one is left
        to its owner or to recovery, never executed a second time from here.

        No status check first: DBOS's start is idempotent by id, and it runs the workflow
        only when this very call created its row (its creator token); for a row that was
        there already it returns a handle that polls.
        """
        generation = await _generation(self.services, session_id)
        wf = workflow_id(session_id, generation)
        with SetWorkflowID(wf):
            self._handles[wf] = await DBOS.start_workflow_async(
                session_workflow, session_id, generation
            )

    async def next_generation(self, session_id: str) -> None:
        """Retire the current workflow (cancelled if unfinished) and start the next one."""
        await self._retire(session_id)
        await self.start_session(session_id)

    async def _retire(self, session_id: str) -> None:
        current = await _generation(self.services, session_id)
        old = workflow_id(session_id, current)
        if await self.workflow_status(old) in ("PENDING", "ENQUEUED"):
            await DBOS.cancel_workflow_async(old)
        await run_in_thread(_advance_generation, session_id, current)

    async def session_outcome(self, session_id: str) -> dict[str, Any]:
        """Wait for the session's workflow to end (following rollovers and takeovers) and
        return its outcome."""
        while True:
            wf = await self.current_workflow(session_id)
            handle = self._handles.pop(wf, None)
            try:
                if handle is None:
                    handle = await DBOS.retrieve_workflow_async(wf)
                # A handle of a workflow this process runs ignores the interval.
                outcome = await handle.get_result(polling_interval_sec=RESULT_POLL_SECONDS)
            except Exception as exc:  # cancelled or failed workflows raise here
                status = (await run_in_thread(self.services.catalog.get_session, session_id)).status
                return {"status": status, "reason": type(exc).__name__}
            if outcome and outcome.get("status") == SUPERSEDED:
                # Another execution runs it now: wait for the outcome it records.
                await asyncio.sleep(RESULT_POLL_SECONDS)
                continue
            if not outcome or outcome.get("status") != ROLLED_OVER:
                return outcome or {}

    async def workflow_status(self, wf_id: str) -> str | None:
        """DBOS's status of a workflow (PENDING, SUCCESS, ERROR, CANCELLED...), or None."""
        status = await DBOS.get_workflow_status_async(wf_id)
        return status.status if status else None

    async def ring(self, session_id: str) -> None:
        """Wake the session if it waits on its doorbell; the message itself is in the inbox."""
        try:
            await DBOS.send_async(await self.current_workflow(session_id), "ring", "doorbell")
        except Exception:  # no workflow yet or finished: the inbox keeps the message
            return

    async def cancel(self, session_ids: list[str]) -> None:
        """Stop these sessions' workflows (their catalog status is set by the caller)."""
        for sid in session_ids:
            wf = await self.current_workflow(sid)
            if await self.workflow_status(wf) in ("PENDING", "ENQUEUED"):
                await DBOS.cancel_workflow_async(wf)

    # -- history: what the maintenance tools prune (EngineOps) ----------------------------

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


def _beat(ref: weakref.ReferenceType[Engine]) -> None:
    """Renew the engine's lease every beat until it stops, is dropped, or loses the lease.

    Holds the engine weakly: a Host that was dropped without a shutdown (a script that
    only created a session) must not keep a thread beating for ever."""
    while True:
        engine = ref()
        if engine is None:
            return
        stop, interval = engine._stop, engine.services.settings.heartbeat_seconds
        del engine
        if stop.wait(interval):
            return
        engine = ref()
        if engine is None:
            return
        try:
            held = engine.workers.heartbeat(engine.executor_id)
        except Exception:  # a busy database must not kill the heartbeat thread
            continue
        if not held and not stop.is_set():
            engine._lost_lease()
            return
        del engine


def _pending_workflows(sys_db: Any, executors: list[str]) -> list[sa.ColumnElement[bool]]:
    """DBOS's get_pending_workflows predicates (its recovery's choice of what to requeue)
    for these executors, of this application and version."""
    ws = sys_db.tables.workflow_status
    return [
        ws.c.status == "PENDING",
        ws.c.executor_id.in_(executors),
        ws.c.application_version == APP_VERSION,
        sys_db._name_filter(ws.c.application_name, sys_db.app_name),
    ]


def _reenqueue_all(sys_db: Any, executors: list[str], queue: str) -> int:
    """DBOS's reenqueue_for_recovery for every PENDING workflow of these executors (of this
    application and version) in one UPDATE; returns how many moved."""
    if not executors:
        return 0
    ws = sys_db.tables.workflow_status
    with sys_db.engine.begin() as conn:
        return conn.execute(
            sa.update(ws)
            .where(*_pending_workflows(sys_db, executors))
            .values(
                status="ENQUEUED",
                owner_xid=None,
                started_at_epoch_ms=None,
                updated_at=sys_db._now_ms_sql(),
                queue_name=sa.func.coalesce(ws.c.queue_name, queue),
            )
        ).rowcount


def _dbos() -> Any:
    """The launched DBOS instance, for the two recovery calls DBOS offers no public form of
    (see the module docstring)."""
    from dbos._dbos import _get_dbos_instance

    return _get_dbos_instance()


def ring_offline(settings: Settings, wf_id: str) -> None:
    """Ring a session's doorbell from a process that runs no engine (best effort)."""
    try:
        client = DBOSClient(system_database_url=settings.store_url)
    except Exception:
        return
    try:
        client.send(wf_id, "ring", "doorbell")
    except Exception:  # no such workflow yet: the inbox keeps the message
        pass
    finally:
        client.destroy()


def cancel_offline(
    settings: Settings, store: sa.Engine, cancel: list[str], ring: list[str]
) -> None:
    """Stop these workflows and ring those doorbells from a process that runs no engine:
    DBOS's client writes the system tables, and whichever process runs a workflow stops it
    at its next step (a finished one is left as it is). On a store no engine ever ran on
    there is no workflow to stop."""
    if not _has_workflow_tables(store):
        return
    client = DBOSClient(system_database_url=settings.store_url)
    try:
        for wf_id in cancel:
            client.cancel_workflow(wf_id)
        for wf_id in ring:
            with contextlib.suppress(Exception):  # no such workflow: nothing waits on it
                client.send(wf_id, "ring", "doorbell")
    finally:
        client.destroy()


def _has_workflow_tables(store: sa.Engine) -> bool:
    # DBOS keeps its tables in the schema `dbos` on PostgreSQL, beside ours on SQLite.
    schema = "dbos" if store.dialect.name == "postgresql" else None
    with store.connect() as conn:
        return sa.inspect(conn).has_table("workflow_status", schema=schema)


async def run_in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Blocking work off the event loop."""
    return await asyncio.to_thread(fn, *args)
