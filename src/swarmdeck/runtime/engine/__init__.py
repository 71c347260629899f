"""The DBOS seam (this package is all that imports DBOS; everything else speaks in sessions):
the engine's launch and recovery policy. Its DBOS calls are in workflow.py, claims.py and
sqlite_listener.py beside it.

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
- a fair share. DBOS lets a worker claim up to its concurrency; here each claim is bounded
  by the worker's share of the queue's work among the live workers (claims.py), so the
  worker that hears of a burst first does not take all of it.
- fencing. A worker that was only paused comes back still running its sessions. DBOS
  already refuses its engine steps (each execution owns its workflow by a token); the
  session's own journal lives in the catalog, where each execution writes under an epoch
  it took as it started (catalog/fence.py), so its turns, tool results and end are refused
  too, and it stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid
import weakref
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig, SetWorkflowID
from dbos._core import prepare_enqueued_workflow
from dbos._utils import INTERNAL_QUEUE_NAME

from swarmdeck.catalog import schema
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.config import Settings
from swarmdeck.runtime.durable import ROLLED_OVER, SUPERSEDED, SessionRunner
from swarmdeck.runtime.engine.active_counts import CountedActiveWorkflows, count_active_workflows
from swarmdeck.runtime.engine.claims import PromptClaims, launch_serving
from swarmdeck.runtime.engine.history import WorkflowHistory
from swarmdeck.runtime.engine.sqlite_listener import index_unconsumed, install_sqlite_listener
from swarmdeck.runtime.engine.workflow import (
    APP_NAME,
    APP_VERSION,
    RESULT_POLL_SECONDS,
    ROLES,
    SESSIONS_QUEUE,
    WORKFLOW_FORMAT,
    advance_generation,
    current_generation,
    dbos_instance,
    pending_workflows,
    quiet_expected_warnings,
    reenqueue_all,
    run_in_thread,
    session_workflow,
    set_runner,
    stop_all_here,
    stop_here,
)
from swarmdeck.runtime.services import Services, set_services
from swarmdeck.runtime.workflow_ids import workflow_id

# How long a cancel made here waits for the cancelled sessions' turns to stop.
STOP_WAIT_SECONDS = 5.0

log = logging.getLogger(__name__)


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


class Engine(WorkflowHistory):
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
        self._prompt: PromptClaims | None = None
        self._active: CountedActiveWorkflows | None = None
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
        settings = self.services.settings
        set_runner(self.runner)
        self.services.engine_ops = self
        self.services.limiter.set_owner(self.executor_id)
        set_services(self.services)
        self.register()
        quiet_expected_warnings()
        if settings.is_sqlite:
            install_sqlite_listener()
        DBOS(config=_dbos_config(settings, self.services, self.executor_id))
        self._active = count_active_workflows(dbos_instance())
        if not self.serve_queue:
            DBOS.listen_queues([])
            DBOS.launch()
        else:
            launch_serving(self._register_queue)
        if settings.is_sqlite:
            index_unconsumed(dbos_instance()._sys_db)
        self._launched = True
        if self.serve_queue:
            self._prompt = PromptClaims(dbos_instance(), self._serving_peers)
        # Slots a crashed worker held (mid-call, or kept between calls) are free again now,
        # whether or not this process takes over its sessions.
        self.services.limiter.free_slots_of(self.workers.crashed())

    def _serving_peers(self) -> int:
        """The live processes that share the fleet's queue's work: the fleet's workers,
        and this process when it only lends a hand."""
        return len(self.workers.alive("worker")) + (self.role != "worker")

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
                sys_db = dbos_instance()._sys_db
                left.append(sa.exists().where(*pending_workflows(sys_db, [self.executor_id])))
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
        dbos = dbos_instance()
        queue = SESSIONS_QUEUE if self.serve_queue else INTERNAL_QUEUE_NAME
        moved = 0
        # One statement for all of them: a transaction per workflow (DBOS's own call) took
        # 1.8 s for 100 sessions on a restart, while those already back on the queue
        # competed with it. Only rows still PENDING under the dead executors move: a
        # duplicate request, or one racing a live worker that took it, changes nothing.
        moved += reenqueue_all(dbos._sys_db, executors, queue)
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
        dbos = dbos_instance()
        statuses = [
            prepare_enqueued_workflow(
                dbos,
                session_workflow,
                (sid, generation, WORKFLOW_FORMAT),
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
        runners = self.services.runners_here()
        taken = self.services.catalog.take_handover(self.executor_id, limit, runners)
        self._enqueue_all(taken)
        if taken and self._prompt is not None:
            self._prompt.claim_now()
        return [sid for sid, current_generation in taken]

    # -- sessions ----------------------------------------------------------------------

    async def current_workflow(self, session_id: str) -> str:
        """The workflow id of the session's current generation."""
        return workflow_id(session_id, await current_generation(self.services, session_id))

    async def start_session(self, session_id: str) -> None:
        """Start the current generation's workflow unless it exists; an existing one is left
        to its owner or to recovery, never executed a second time from here.

        No status check first: DBOS's start is idempotent by id, and it runs the workflow
        only when this very call created its row (its creator token); for a row that was
        there already it returns a handle that polls.
        """
        generation = await current_generation(self.services, session_id)
        wf = workflow_id(session_id, generation)
        if self._taken_over and await self.workflow_status(wf) is not None:
            # This process took over a dead executor's sessions and put their workflows back
            # on a queue, which runs them: a start would only find the row there and make
            # DBOS warn on stderr that it stays on its queue (`sessions resume` after a
            # SIGKILLed run). One read, and only after a takeover.
            self._handles[wf] = await DBOS.retrieve_workflow_async(wf)
            return
        with SetWorkflowID(wf):
            self._handles[wf] = await DBOS.start_workflow_async(
                session_workflow, session_id, generation, WORKFLOW_FORMAT
            )

    async def next_generation(self, session_id: str) -> None:
        """Retire the current workflow (cancelled if unfinished) and start the next one."""
        await self._retire(session_id)
        await self.start_session(session_id)

    async def _retire(self, session_id: str) -> None:
        current = await current_generation(self.services, session_id)
        old = workflow_id(session_id, current)
        self._handles.pop(old, None)  # retired: session_outcome must not wait on it
        if await self.workflow_status(old) in ("PENDING", "ENQUEUED"):
            await DBOS.cancel_workflow_async(old)
        await run_in_thread(advance_generation, session_id, current)

    async def session_outcome(self, session_id: str) -> dict[str, Any]:
        """Wait for the session's workflow to end (following rollovers and takeovers) and
        return its outcome. A first generation this process started needs no read."""
        wf, handle = session_id, self._handles.pop(workflow_id(session_id, 0), None)
        while True:
            if handle is None:
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
            handle = None
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
        """Wake the session if it waits on its doorbell; the message itself is in the inbox.
        A session running here is rung with no read; another is looked up in the store."""
        if not await self.ring_if_here(session_id):
            await _ring(await self.current_workflow(session_id))

    async def ring_if_here(self, session_id: str) -> bool:
        """Ring the session if a generation of it runs here, the newest (see
        CountedActiveWorkflows.newest_generation), with no read of the store; False when
        none does (it runs elsewhere, or between generations: the caller asks the store)."""
        generation = None if self._active is None else self._active.newest_generation(session_id)
        if generation is None:
            return False
        await _ring(workflow_id(session_id, generation))
        return True

    async def cancel(self, session_ids: list[str]) -> None:
        """Stop these sessions' workflows (their catalog status is set by the caller)."""
        cancelled = []
        for sid in session_ids:
            wf = await self.current_workflow(sid)
            if await self.workflow_status(wf) in ("PENDING", "ENQUEUED"):
                await DBOS.cancel_workflow_async(wf)
                cancelled.append(wf)
        await stop_here(cancelled, STOP_WAIT_SECONDS)

    async def stop_sessions_here(self) -> None:
        """Stop the session workflows this process runs before it closes what they use:
        they stay PENDING, resumable or taken over as after a crash."""
        await stop_all_here(STOP_WAIT_SECONDS)


async def _ring(wf: str) -> None:
    """Ring a session workflow's doorbell (the message itself is in the inbox)."""
    try:
        await DBOS.send_async(wf, "ring", "doorbell")
    except Exception:  # no workflow yet, or it ended: the inbox keeps the message
        return


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
