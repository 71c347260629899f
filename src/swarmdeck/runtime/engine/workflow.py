"""The session workflow on DBOS: the one workflow the engine registers, the durable
primitives the loop runs on, and the DBOS calls made from outside a workflow (the offline
client, the recovery statement)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSClient, SetWorkflowID
from dbos._context import get_local_dbos_context

from swarmdeck.config import Settings
from swarmdeck.runtime.durable import SessionRunner
from swarmdeck.runtime.services import Services, services
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


# Within that name, each workflow carries the format it was started in as its third input
# (DBOS records the inputs, and replays and recovers a workflow with them): a workflow of
# an earlier release has two inputs and replays format 1's steps, whatever this release
# starts new sessions in. So a release may change the steps without stranding anyone, as
# long as the loop keeps taking the old path for the old format (Durable.format).
# 2: a wait sleeps on its first look's answer, without a second look before the sleep.
# 3: an idle session woken by a person's message takes it at once, with no quiet gap for a
#    batch (only children's news is batched).
# 4: a wait takes no step before it sleeps (its deadline counts from the time its turn's
#    latest entry was journaled) and looks at the inbox only when the doorbell rings early;
#    an idle session's statuses take no steps (`idle` is stored with the turn that rests,
#    `running` with the drain that wakes it).
# 5: a session that rests after its turn waits on the doorbell first, without a look at
#    the inbox (mail that came during the turn rang it), and reads the clock only for a
#    cron: a message that wakes it costs three engine steps instead of five.
# 6: a session loop's drain of its inbox is no engine step: its claim in the inbox is its
#    record (a replay past it reads what the claim took; see Durable.replaying), and a
#    message that wakes a session costs two engine steps.
WORKFLOW_FORMAT = 6


# The fleet's queue of sessions (DBOS reserves names starting with `_dbos_`).
SESSIONS_QUEUE = "swarmdeck_sessions"


# Waiting on a workflow that runs elsewhere polls the store; DBOS's default is 1 s, which
# added up to a second to every run's end.
RESULT_POLL_SECONDS = 0.05


ROLES = ("worker", "local")


# The shortest timeout of a recv whose deadline has passed: it still takes its place.
MIN_RECV_SECONDS = 0.001


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

    def __init__(self, fmt: int) -> None:
        self.format = fmt
        # The last operation earlier runs of this workflow recorded (-1: none), read once.
        self._frontier: int | None = None

    async def step(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        if not inspect.iscoroutinefunction(fn):
            fn = _off_loop(fn)
        return await DBOS.run_step_async({"name": name}, fn, *args)

    async def replaying(self) -> bool:
        ctx = get_local_dbos_context()
        assert ctx is not None and ctx.is_workflow(), "replaying() outside a workflow"
        if self._frontier is None:
            # This execution's own operations are all at or below ctx.function_id, so one
            # past it was recorded by an earlier run; once past the last, none ever is.
            self._frontier = await run_in_thread(last_recorded_operation, ctx.workflow_id)
        return ctx.function_id < self._frontier

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
            await DBOS.start_workflow_async(session_workflow, session_id, 0, WORKFLOW_FORMAT)

    async def send(self, session_id: str, message: Any, topic: str) -> None:
        generation = await current_generation(services(), session_id)
        await DBOS.send_async(workflow_id(session_id, generation), message, topic)

    async def restart_as_new(self, session_id: str, generation: int) -> None:
        nxt = await self.step("next_generation", advance_generation, session_id, generation)
        with SetWorkflowID(workflow_id(session_id, nxt)):
            await DBOS.start_workflow_async(session_workflow, session_id, nxt, WORKFLOW_FORMAT)


async def current_generation(svc: Services, session_id: str) -> int:
    """The session's current generation (read off the loop: on PostgreSQL a read is a
    network round trip)."""
    return (await run_in_thread(svc.catalog.get_session, session_id)).generation


def last_recorded_operation(wf_id: str) -> int:
    """The function id of the last operation recorded for a workflow; -1 when none is."""
    sys_db = dbos_instance()._sys_db
    outputs = sys_db.tables.operation_outputs
    last = sa.select(sa.func.max(outputs.c.function_id)).where(*sys_db._wf(outputs, wf_id))
    with sys_db.engine.connect() as conn:
        found = conn.execute(last).scalar()
    return -1 if found is None else int(found)


def advance_generation(session_id: str, current: int) -> int:
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


def set_runner(runner: SessionRunner) -> None:
    """Name what session workflows run in this process (the engine sets it as it launches)."""
    global _runner
    _runner = runner


# The tasks of the session workflows running in this process, by workflow id. A DBOS cancel
# takes effect at the workflow's next DBOS call, but a model turn or a tool call is not one:
# it ran on after a Ctrl-C, streaming into a runtime already shut down, and could finish the
# session after it was given up. A cancel made here stops the task itself (see stop_here).
_running_here: dict[str, asyncio.Task[Any]] = {}


@DBOS.workflow(name=SESSION_WORKFLOW)
async def session_workflow(session_id: str, generation: int, fmt: int = 1) -> dict[str, Any]:
    """One generation of a session, durably, in the steps of format `fmt` (see
    WORKFLOW_FORMAT: a workflow an earlier release started has no third input)."""
    if _runner is None:
        raise RuntimeError("no session runner: the engine was launched without one")
    wf = workflow_id(session_id, generation)
    task = asyncio.current_task()
    if task is not None:
        _running_here[wf] = task
    try:
        return await _runner(session_id, generation, _DBOSDurable(fmt))
    finally:
        if _running_here.get(wf) is task:
            del _running_here[wf]


async def stop_here(workflow_ids: list[str], timeout_s: float) -> None:
    """Stop the tasks of these (cancelled) workflows that run in this process, and wait up
    to `timeout_s` for them to end. What they left unfinished is what a SIGKILL leaves: the
    journal says which step was under way, and a resume takes it from there."""
    tasks = [t for wf in workflow_ids if (t := _running_here.get(wf)) is not None]
    tasks = [t for t in tasks if not t.done() and t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout_s)


async def stop_all_here(timeout_s: float) -> None:
    """stop_here for every session workflow this process runs (the process is leaving)."""
    await stop_here(list(_running_here), timeout_s)


def pending_workflows(sys_db: Any, executors: list[str]) -> list[sa.ColumnElement[bool]]:
    """DBOS's get_pending_workflows predicates (its recovery's choice of what to requeue)
    for these executors, of this application and version."""
    ws = sys_db.tables.workflow_status
    return [
        ws.c.status == "PENDING",
        ws.c.executor_id.in_(executors),
        ws.c.application_version == APP_VERSION,
        sys_db._name_filter(ws.c.application_name, sys_db.app_name),
    ]


def reenqueue_all(sys_db: Any, executors: list[str], queue: str) -> int:
    """DBOS's reenqueue_for_recovery for every PENDING workflow of these executors (of this
    application and version) in one UPDATE; returns how many moved."""
    if not executors:
        return 0
    ws = sys_db.tables.workflow_status
    with sys_db.engine.begin() as conn:
        return conn.execute(
            sa.update(ws)
            .where(*pending_workflows(sys_db, executors))
            .values(
                status="ENQUEUED",
                owner_xid=None,
                started_at_epoch_ms=None,
                updated_at=sys_db._now_ms_sql(),
                queue_name=sa.func.coalesce(ws.c.queue_name, queue),
            )
        ).rowcount


def dbos_instance() -> Any:
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
