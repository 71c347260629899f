"""The DBOS seam: the only module that imports DBOS. Everything else speaks in sessions."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from dbos import DBOS, DBOSClient, DBOSConfig, SetWorkflowID

from swarmdeck import __version__
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.config import Settings
from swarmdeck.runtime.services import Services, services, set_services
from swarmdeck.runtime.session import run_session

APP_NAME = "swarmdeck"
# A fixed version: every process of a release must agree on it, or recovery (which is
# filtered by application version) would skip the sessions another process started.
APP_VERSION = f"swarmdeck-{__version__}"
HEARTBEAT_SECONDS = 2.0
# Waiting on a workflow that runs elsewhere polls the store; DBOS's default is 1 s, which
# added up to a second to every run's end.
RESULT_POLL_SECONDS = 0.05
SESSION_WORKFLOW = "swarmdeck.session"
ENDED_WORKFLOW_STATUSES = ["SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"]


class _ExpectedCancels(logging.Filter):
    """Drops DBOS's warning for a cancelled task: a process that stops (or a run that ends
    while sessions idle) cancels its sessions' workflows on purpose; they stay resumable,
    and the warning only alarmed users (on `sessions resume`, in the quickstart)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Asyncio task cancelled")


_EXPECTED_CANCELS = _ExpectedCancels()


def quiet_expected_cancels() -> None:
    """Install the filter on DBOS's logger (once; DBOS keeps its own handlers)."""
    dbos_log = logging.getLogger("dbos")
    if _EXPECTED_CANCELS not in dbos_log.filters:
        dbos_log.addFilter(_EXPECTED_CANCELS)


def workflow_id(session_id: str, generation: int) -> str:
    """The workflow of one generation of a session."""
    return session_id if generation == 0 else f"{session_id}~g{generation}"


def session_of_workflow(wf_id: str) -> tuple[str, int]:
    """(session id, generation) of a session workflow's id."""
    session_id, _, generation = wf_id.partition("~g")
    return session_id, int(generation) if generation.isdigit() else 0


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


@DBOS.workflow(name=SESSION_WORKFLOW)
async def session_workflow(session_id: str, generation: int) -> dict[str, Any]:
    """One generation of a session, durably."""
    return await run_session(session_id, generation, _DBOSDurable())


def new_executor_id() -> str:
    """A unique executor id per process (two processes sharing one ran a step twice)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


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
    """A launched DBOS runtime in this process, registered as a live worker."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.executor_id = new_executor_id()
        self.workers = WorkerRegistry(services.catalog.engine)
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        # Handles of workflows started by this process: awaiting them needs no polling.
        self._handles: dict[str, Any] = {}

    def launch(self) -> None:
        """Start DBOS and the heartbeat; register as a worker."""
        self.services.engine_ops = self
        self.services.limiter.set_owner(self.executor_id)
        set_services(self.services)
        quiet_expected_cancels()
        DBOS(config=_dbos_config(self.services.settings, self.services, self.executor_id))
        DBOS.launch()
        self.workers.register(self.executor_id)
        # Slots a crashed worker held (mid-call, or kept between calls) are free again now,
        # whether or not this process takes over its sessions.
        self.services.limiter.free_slots_of(self.workers.crashed())
        self._heartbeat = threading.Thread(target=self._beat, name="sd-heartbeat", daemon=True)
        self._heartbeat.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            try:
                self.workers.heartbeat(self.executor_id)
            except Exception:  # a busy database must not kill the heartbeat thread
                continue

    def shutdown(self) -> None:
        """Stop cleanly; sessions still running become claimable by the next worker."""
        self._stop.set()
        try:
            self.workers.stop(self.executor_id)
        finally:
            DBOS.destroy(workflow_completion_timeout_sec=0)
            set_services(None)

    def recover_dead_workers(self) -> list[str]:
        """Take over the unfinished sessions of executors that died or stopped."""
        claimed = self.workers.claim_dead(self.executor_id)
        if claimed:
            # A dead worker's provider slots would stay taken until their leases ran out
            # (the call timeout plus a margin): free them now.
            self.services.limiter.free_slots_of(claimed)
            DBOS._recover_pending_workflows(claimed)
        return claimed

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
        current = await _generation(self.services, session_id)
        old = workflow_id(session_id, current)
        if await self.workflow_status(old) in ("PENDING", "ENQUEUED"):
            await DBOS.cancel_workflow_async(old)
        await run_in_thread(_advance_generation, session_id, current)
        await self.start_session(session_id)

    async def session_outcome(self, session_id: str) -> dict[str, Any]:
        """Wait for the session's workflow to end (following rollovers) and return its outcome."""
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
            if not outcome or outcome.get("status") != "rolled_over":
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


async def run_in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Blocking work off the event loop."""
    return await asyncio.to_thread(fn, *args)
