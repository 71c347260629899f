"""A host process for sessions: builds services, launches the engine, creates and follows
sessions. The CLI and the Python SDK both stand on it."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.ids import new_session_id
from swarmdeck.catalog.liveness import WorkerRow
from swarmdeck.catalog.records import COMPACT_REQUEST_KIND, EventRecord, InboxPost, SessionRecord
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.config import Settings, load_settings
from swarmdeck.errors import MissingKeyError, TaskRefusedError, UsageError
from swarmdeck.runtime.crashpoints import crash_point
from swarmdeck.runtime.engine import Engine
from swarmdeck.runtime.engine.workflow import cancel_offline, ring_offline
from swarmdeck.runtime.project_docs import PROJECT_DOCS_OPTION
from swarmdeck.runtime.request import SessionRequest
from swarmdeck.runtime.services import Services
from swarmdeck.runtime.session import run_session
from swarmdeck.runtime.tree import cancel_tree, mark_cancelled
from swarmdeck.runtime.workflow_ids import workflow_id
from swarmdeck.tools.base import Tool
from swarmdeck.tools.toolsets import SessionScope
from swarmdeck.workspace.modes import requested_mode, with_workspace
from swarmdeck.workspace.rundir import RunDir

FOLLOW_POLL_SECONDS = 0.05
# What a request to compact says in the transcript.
COMPACT_TEXT = "a person asked to compact the context now"


def default_tools() -> list[Tool]:
    """Built-in tools every session may be offered (filtered by mode)."""
    from swarmdeck.tools.builtins.registry import builtin_tools

    return builtin_tools()


def _restore_default_executor() -> None:
    """The engine made its thread pool the running loop's default executor and shut it down
    with itself: give the loop a working one back, or asyncio.to_thread fails after."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    loop.set_default_executor(ThreadPoolExecutor())


class Host:
    """Sessions in this process: validate, create, run, follow.

    `role` and `serve_queue` say what this process is to the fleet (see Engine): a worker,
    or a local process that runs its own sessions (and, with `serve_queue`, the fleet's).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        tools: list[Tool] | None = None,
        *,
        role: str = "local",
        serve_queue: bool = False,
    ) -> None:
        self.settings = settings or load_settings()
        self.services = Services.build(self.settings, tools or default_tools())
        self.engine: Engine | None = None
        self.role = role
        self.serve_queue = serve_queue

    @property
    def catalog(self):
        """The session catalog."""
        return self.services.catalog

    def lease(self) -> Engine:
        """This process's executor, registered with a live lease (the engine not launched)."""
        if self.engine is None:
            self.engine = Engine(self.services, run_session, self.role, self.serve_queue)
        self.engine.register()
        return self.engine

    def launch(self) -> Engine:
        """Start the durable engine in this process (once)."""
        engine = self.lease()
        if not engine.launched:
            engine.launch()
        return engine

    def fleet_workers(self) -> list[WorkerRow]:
        """The live fleet workers serving this store (other processes)."""
        mine = self.engine.executor_id if self.engine else None
        workers = WorkerRegistry(
            self.catalog.engine, self.settings.hostname, self.settings.lease_seconds
        )
        return [w for w in workers.alive("worker") if w.executor_id != mine]

    async def close_on_loop(self) -> None:
        """Stop the session workflows this process runs, then close its MCP servers and
        connection pools on the loop they were opened on (shutdown() cannot await them)."""
        if self.engine is not None and self.engine.launched:
            await self.engine.stop_sessions_here()
        await self.services.aclose()

    async def aclose(self) -> None:
        """shutdown() from inside an event loop: close_on_loop() first."""
        await self.close_on_loop()
        self.shutdown()

    def shutdown(self) -> None:
        """Stop the engine; unfinished sessions stay resumable."""
        # Before the engine stops: its loop must still run to close the pools opened on it.
        self.services.close_models_now()
        if self.engine is not None:
            self.engine.shutdown()
            self.engine = None
            _restore_default_executor()
        self.services.limiter.give_back_kept()
        # The process may leave without the interpreter's teardown (dispatch does).
        self.services.tracing.flush()

    def check_request(self, req: SessionRequest) -> None:
        """Refuse what cannot work before anything is stored or sent."""
        requested_mode(req.options)  # an unknown workspace mode is refused here
        if not req.workdir.is_dir():
            raise UsageError(
                f"workdir does not exist: {req.workdir}", "pass an existing directory to --workdir"
            )
        config, _ = self.services.provider_for(req.model)
        if config.needs_key and not self.services.credentials.has(config.key):
            raise MissingKeyError(
                f"no key for provider {config.key}", f"run `swarmdeck key set {config.key}`"
            )
        found = self.services.redactor.contains_secret(req.task)
        if found:
            raise TaskRefusedError(
                f"task refused: it contains a credential ({found})",
                "remove the secret from the task; workers read keys from the credential store",
            )
        plugins = self.services.plugins_for(
            str(req.workdir.resolve()), req.options.get("plugins") or ()
        )
        scope = SessionScope(
            "", req.mode, req.workdir.resolve(), req.options, tuple(plugins.plugins)
        )
        self.services.preflight(scope)

    def create_session(self, req: SessionRequest, *, fleet: bool = False) -> SessionRecord:
        """Store a new pending session (its task is the transcript's first entry).

        Without `fleet`, this process will start it: it takes its lease first, so the
        session is answerable to a live lease from the moment it exists, and a worker
        starts it should this process die before it does. With `fleet`, it is handed to
        the fleet: any live worker takes it.
        """
        return self.create_sessions([req], fleet=fleet)[0]

    def create_sessions(
        self, requests: list[SessionRequest], *, fleet: bool = False
    ) -> list[SessionRecord]:
        """Store new pending sessions in one transaction, as create_session would each;
        every request is checked before any is stored."""
        for req in requests:
            self.check_request(req)
        executor = None if fleet else self.lease().executor_id
        specs = []
        docs: dict[str, str] = {}  # by workdir: ten thousand sessions in one read
        for req in requests:
            session_id = req.session_id or new_session_id()
            run_dir = RunDir.create(self.settings.runs_dir, session_id)
            options = self._with_workspace(req, session_id)
            if PROJECT_DOCS_OPTION not in options:
                workdir = str(req.workdir.resolve())
                if workdir not in docs:
                    docs[workdir] = self.services.project_docs_for(Path(workdir))
                options = (
                    {**options, PROJECT_DOCS_OPTION: docs[workdir]} if docs[workdir] else options
                )
            specs.append(
                {
                    "session_id": session_id,
                    "model": req.model,
                    "mode": req.mode,
                    "workdir": str(req.workdir.resolve()),
                    "run_dir": str(run_dir.path),
                    "task": req.task,
                    "title": req.title,
                    "system_message": req.system_message,
                    "tool_names": req.tool_names,
                    "options": options,
                    "executor": executor,
                    "agent": req.agent,
                }
            )
        records = self.catalog.create_sessions(specs)
        if fleet:
            self.catalog.notify_handover()
        crash_point("session.created")
        return records

    def _with_workspace(self, req: SessionRequest, session_id: str) -> dict[str, Any]:
        """The request's options; with a store workspace (asked for: the SDK and the short
        form of `run` have no delivery, so they never choose it themselves), its workdir
        captured first."""
        return with_workspace(
            req.options, False, self.settings, self.catalog, req.workdir, session_id
        )

    def send(
        self,
        session_id: str,
        text: str,
        msg_id: str | None = None,
        kind: str = "user",
        pinned: bool = False,
    ) -> bool:
        """Deliver a message to a session's durable inbox; a retry with the same id is a no-op.

        Works whether or not a worker runs the session now: the message waits in the catalog.
        A `pinned` message is kept verbatim when older turns are compacted (runtime/journal).
        """
        payload: dict[str, Any] = {"text": text, "pinned": True} if pinned else {"text": text}
        post = InboxPost(session_id, msg_id or secrets.token_hex(8), kind, payload)
        delivery = self.catalog.post_live(post)
        if delivery.ended is not None:
            raise UsageError(
                f"session {session_id} has ended ({delivery.ended})",
                "start a new session, or continue a code session with --mode resume",
            )
        if self.engine is not None and self.engine.launched:
            return delivery.fresh  # the caller rings in-process (see ring)
        # Read after the message is stored: a generation read before could be one that
        # ended since, and its new one have looked at the inbox before the message came.
        record = self.catalog.get_session(session_id)
        if record.executor and any(w.executor_id == record.executor for w in self.fleet_workers()):
            return delivery.fresh  # its worker rings it when it sees the message (duties.py)
        ring_offline(self.settings, workflow_id(session_id, record.generation))
        return delivery.fresh

    def compact(self, session_id: str, msg_id: str | None = None) -> bool:
        """Ask a session to compact its context now: a durable request it takes at its next
        turn boundary (at once when it rests). A retry with the same id is a no-op."""
        return self.send(session_id, COMPACT_TEXT, msg_id, kind=COMPACT_REQUEST_KIND)

    def answer(self, session_id: str, text: str, msg_id: str | None = None) -> bool:
        """Answer a session's ask_user question; a retry with the same id is a no-op (False),
        even once the session has taken the answer and moved on."""
        if msg_id is not None and self.catalog.has_message(session_id, msg_id):
            return False
        record = self.catalog.get_session(session_id)
        if record.status != "input_required":
            raise UsageError(
                f"session {session_id} is not waiting for an answer (it is {record.status})",
                "`swarmdeck sessions show ID` shows what it is doing",
            )
        return self.send(session_id, text, msg_id, kind="answer")

    async def ring(self, session_id: str) -> None:
        """Wake a session after a message (in-process engine)."""
        await self.launch().ring(session_id)

    async def cancel(self, session_id: str, reason: str = "cancelled by the user") -> list[str]:
        """Cancel a session and all its descendants."""
        self.launch()
        return await cancel_tree(session_id, reason)

    def cancel_offline(self, session_id: str, reason: str = "cancelled by the user") -> list[str]:
        """cancel() without launching the engine here (a TUI, a planner's tool): the same
        tree, stopped through DBOS's client."""
        return cancel_tree_offline(self.catalog, self.settings, session_id, reason)

    async def continue_session(self, session_id: str, text: str) -> None:
        """Give an earlier session a new instruction and run it again (resume)."""
        found = self.services.redactor.contains_secret(text)
        if found:
            raise TaskRefusedError(f"task refused: it contains a credential ({found})")
        await self._run_again(session_id, text)

    async def retry_session(self, session_id: str) -> None:
        """Run a failed or stopped session again (the endpoint is back, the store fixed, the
        Ctrl-C regretted): a new generation, which asks the model again for the turn that
        did not finish. What was stored stays, and no stored turn is asked for again."""
        record = self.catalog.get_session(session_id)
        if record.status not in ("failed", "cancelled"):
            raise UsageError(
                f"session {session_id} has not failed or been stopped (it is {record.status})",
                "only such a session is run again; `swarmdeck sessions show ID` shows it",
            )
        await self._run_again(session_id, None)

    async def _run_again(self, session_id: str, text: str | None) -> None:
        """Start the session's next generation, with a new instruction first if given."""
        record = self.catalog.get_session(session_id)
        engine = self.launch()
        # The caller may have changed the session's prompt or options for this run.
        self.services.forget(session_id)
        self.catalog.update_session(session_id, status="pending", error=None)
        if text is not None:
            key = f"resume:{record.generation + 1}"
            self.catalog.append_event(session_id, key, "user", {"text": text})
        await engine.next_generation(session_id)

    def remove(self, session_id: str) -> list[str]:
        """Delete a finished session with its whole subtree (never leaves orphans)."""
        ids = [session_id, *self.catalog.descendant_ids(session_id)]
        live = [i for i in ids if not self.catalog.get_session(i).terminal]
        if live:
            raise UsageError(
                f"session tree still has live sessions: {', '.join(live)}",
                f"cancel it first: `swarmdeck sessions cancel {session_id}`",
            )
        return self.catalog.delete_session_tree(session_id)

    async def start(self, session_id: str) -> None:
        """Run the session's workflow in this process."""
        await self.launch().start_session(session_id)

    async def wait(self, session_id: str) -> dict[str, Any] | None:
        """Wait for the session's workflow to end."""
        return await self.launch().session_outcome(session_id)

    async def follow(
        self,
        session_id: str,
        on_event: Callable[[EventRecord], Awaitable[None] | None],
        done: asyncio.Future[Any] | asyncio.Task[Any],
    ) -> None:
        """Deliver the transcript's events as they are stored, until `done` finishes."""
        async for ev in self.events_until(session_id, done):
            result = on_event(ev)
            if asyncio.iscoroutine(result):
                await result

    async def events_until(
        self, session_id: str, done: asyncio.Future[Any] | asyncio.Task[Any]
    ) -> AsyncIterator[EventRecord]:
        """Events from the catalog, polled, until `done` finishes and nothing is left."""
        cursor = 0
        while True:
            finished = done.done()
            batch = await asyncio.to_thread(self.catalog.events, session_id, after_id=cursor)
            for ev in batch:
                cursor = max(cursor, ev.id)
                yield ev
            if finished and not batch:
                return
            await asyncio.sleep(FOLLOW_POLL_SECONDS)


def cancel_tree_offline(
    catalog: Catalog, settings: Settings, session_id: str, reason: str
) -> list[str]:
    """cancel_tree from a process that runs no engine (the TUI): the catalog records the
    cancel, and DBOS's client stops the workflows and rings the doorbells, so the process
    that runs them stops now instead of at its worker's next look. Returns the ids."""
    live, told = mark_cancelled(session_id, reason, True, catalog)
    flows = [workflow_id(i, catalog.get_session(i).generation) for i in live]
    wake = flows + ([workflow_id(told, catalog.get_session(told).generation)] if told else [])
    cancel_offline(settings, catalog.engine, flows, wake)
    return live
