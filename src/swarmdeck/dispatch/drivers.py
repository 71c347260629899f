"""Where a dispatched session runs: in this process (LocalDriver), or on the fleet of
workers that serves the store (FleetDriver). The runner follows either the same way, from
the catalog, so a planner cannot tell which ran: the lines printed are the same.

The fleet path hands the session over with the bare database driver (catalog/direct.py)
and imports neither the engine nor an LLM SDK: a warm worker asks the model at once, and
this process only follows.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from swarmdeck.catalog.direct import DirectCatalog, is_driver_error
from swarmdeck.catalog.liveness import WorkerRow
from swarmdeck.catalog.records import EventRecord, SessionRecord, UsageTotals
from swarmdeck.config import Settings
from swarmdeck.tools.sandbox_info import OPTED_OUT_REASON, SandboxInfo

if TYPE_CHECKING:
    # asyncio (~15 ms) is imported after the hand-over (WARM_MODULES): the follow-up runs
    # on it, the hand-over does not.
    import asyncio

CANCEL_WAIT_S = 10.0
# A session handed to the fleet that no worker took this long is taken back, to run here,
# when no worker is alive any more (one that died just after we looked, say).
TAKE_BACK_AFTER_S = 2.0
CHECK_FLEET_EVERY_S = 1.0
# Modules the follow-up needs, imported in a thread while the worker already works.
WARM_MODULES = ("asyncio", "swarmdeck.dispatch.verdict", "swarmdeck.views.progress")


class Source(Protocol):
    """The catalog reads a runner needs (Catalog and DirectCatalog both offer them)."""

    def events(self, session_id: str, *, after_id: int = 0) -> list[EventRecord]: ...

    def get_session(self, session_id: str) -> SessionRecord: ...

    def usage_totals(
        self, session_ids: list[str], *, since: float | None = None
    ) -> UsageTotals: ...

    def artifact_names(self, session_id: str, since: float | None) -> list[str]: ...


@dataclass
class NewSession:
    """A session to create for a run (the dispatch's own fields)."""

    session_id: str
    task: str
    model: str
    workdir: Path
    mode: str
    title: str
    system_message: str
    tool_names: list[str]
    options: dict[str, Any]


class LocalDriver:
    """Runs the session in this process, on an engine launched here."""

    where = "here"

    def __init__(self, settings: Settings) -> None:
        from swarmdeck.dispatch.schemas import VALIDATORS
        from swarmdeck.runners.driver import register as register_runners
        from swarmdeck.runtime.host import Host

        self.host = Host(settings)
        self.host.services.result_validators.update(VALIDATORS)
        # A dispatch may name an external runner (runners/driver.py runs its session).
        register_runners(self.host.services)
        self.source: Source = self.host.catalog
        self.outcome: asyncio.Future[Any] | None = None

    def create(self, new: NewSession) -> None:
        """Store the session (this process starts it, see start)."""
        from swarmdeck.runtime.host import SessionRequest

        self.host.create_session(
            SessionRequest(
                task=new.task,
                model=new.model,
                workdir=new.workdir,
                mode=new.mode,
                title=new.title,
                system_message=new.system_message,
                tool_names=new.tool_names,
                options=new.options,
                session_id=new.session_id,
            )
        )

    def resume(self, record: SessionRecord, options: dict[str, Any], prompt: str) -> None:
        """Give the session this run's allowance and prompt (see start for the text)."""
        self.host.catalog.update_session(record.id, options=options, system_message=prompt)

    async def start(self, session_id: str, resume_text: str | None) -> None:
        """Start (or, resuming, continue) the session here; `outcome` then finishes when its
        workflow ends."""
        import asyncio

        if resume_text is None:
            await self.host.start(session_id)
        else:
            await self.host.continue_session(session_id, resume_text)
        self.outcome = asyncio.ensure_future(self.host.wait(session_id))

    async def watch(self, session_id: str) -> None:
        """Nothing to watch: the outcome says when it ends."""

    def sandbox(self, opted_out: bool) -> SandboxInfo:
        """The sandbox this process's tools run in (`opted_out`: --no-sandbox)."""
        from swarmdeck.tools.sandbox import sandbox_in_force

        return sandbox_in_force(opted_out or self.host.settings.no_sandbox)

    def sandbox_of_run(self, session_id: str, opted_out: bool) -> SandboxInfo | None:
        """The sandbox the session's tools ran in: this process's."""
        return self.sandbox(opted_out)

    async def stop(self, session_id: str, why: str) -> None:
        """Cancel the session tree; what was done stays in the catalog, resumable."""
        await stop_session(self.host, session_id, why)

    async def close_on_loop(self) -> None:
        """Close what the run opened, on the loop it used: its MCP servers (one that missed
        its start-up timeout too) and the adapters' connection pools."""
        await self.host.close_on_loop()

    def shutdown(self) -> None:
        """Stop the engine."""
        self.host.shutdown()


class FleetDriver:
    """Hands the session to the fleet and follows it; falls back to running it here if no
    worker takes it and none is alive any more."""

    where = "fleet"

    def __init__(self, settings: Settings, direct: DirectCatalog) -> None:
        self.settings = settings
        self.direct = direct
        self.source: Source = direct
        self.outcome: asyncio.Future[Any] | None = None
        self.local: LocalDriver | None = None
        self._handed_at = 0.0
        self._checked_at = 0.0

    def create(self, new: NewSession) -> None:
        """Hand the new session over: any live worker takes it at once."""
        from swarmdeck.workspace.rundir import RunDir

        run_dir = RunDir.create(self.settings.runs_dir, new.session_id)
        row = {
            "id": new.session_id,
            "parent_id": None,
            "root_id": new.session_id,
            "depth": 0,
            "agent": None,
            "model": new.model,
            "mode": new.mode,
            "workdir": str(new.workdir.resolve()),
            "run_dir": str(run_dir.path),
            "title": new.title,
            "system_message": new.system_message,
            "tool_names": new.tool_names,
            "options": self._with_workspace(new),
        }
        self.direct.hand_over(row, new.task)
        self._handed_at = time.monotonic()
        threading.Thread(target=_warm_up, daemon=True).start()

    def _with_workspace(self, new: NewSession) -> dict[str, Any]:
        """The new session's options; with a store workspace (asked for, or chosen because
        workers run on other hosts), its workdir captured first (workspace/modes.py)."""
        from swarmdeck.workspace.modes import requested_mode, with_workspace

        others = requested_mode(new.options) is None and any(
            w.hostname != self.settings.hostname for w in self.live_workers()
        )
        workdir = new.workdir.resolve()
        return with_workspace(
            new.options, others, self.settings, self.direct, workdir, new.session_id
        )

    def live_workers(self) -> list[WorkerRow]:
        """The live fleet workers serving the store."""
        return self.direct.fleet_workers(self.settings.hostname, self.settings.lease_seconds)

    def sandbox(self, opted_out: bool) -> SandboxInfo | None:
        """The sandbox a worker's tools will run the session in; None while that depends on
        which worker takes it (the fleet's workers differ, or none is alive)."""
        return fleet_sandbox(self.live_workers(), opted_out)

    def sandbox_of_run(self, session_id: str, opted_out: bool) -> SandboxInfo | None:
        """The sandbox the tools of the worker that ran the session (last) ran in."""
        if self.local is not None:
            return self.local.sandbox_of_run(session_id, opted_out)
        if opted_out:
            return SandboxInfo("none", OPTED_OUT_REASON)
        executor = self.direct.get_session(session_id).executor
        runner = self.direct.worker(executor) if executor else None
        if runner is None or runner.sandbox is None:
            return self.sandbox(opted_out)
        return SandboxInfo(runner.sandbox, runner.sandbox_reason or "")  # type: ignore[arg-type]

    async def start(self, session_id: str, resume_text: str | None) -> None:
        """Nothing to start: the hand-over was the start."""

    async def watch(self, session_id: str) -> None:
        """Take the session back to run here when no worker took it and none is alive."""
        import asyncio

        now = time.monotonic()
        if self.local is not None or now - self._handed_at < TAKE_BACK_AFTER_S:
            return
        if now - self._checked_at < CHECK_FLEET_EVERY_S:
            return
        self._checked_at = now
        record = await asyncio.to_thread(self.direct.get_session, session_id)
        if record.executor is not None or record.status != "pending":
            return  # a worker took it
        if await asyncio.to_thread(self.live_workers):
            return
        local = LocalDriver(self.settings)
        executor = local.host.lease().executor_id
        if await asyncio.to_thread(self.direct.take_back, session_id, executor):
            self.local = local
            self.source = local.source
            await local.start(session_id, None)
            self.outcome = local.outcome
        else:
            local.shutdown()

    async def stop(self, session_id: str, why: str) -> None:
        """Cancel the session tree in the catalog; its worker stops its workflows."""
        import asyncio

        if self.local is not None:
            await self.local.stop(session_id, why)
            return
        await asyncio.to_thread(_cancel_in_catalog, self.settings, session_id, why)

    async def close_on_loop(self) -> None:
        """Close the MCP servers and connection pools of a session taken back to run here
        (no other session of this process uses them)."""
        if self.local is not None:
            await self.local.close_on_loop()

    def shutdown(self) -> None:
        """Close the connection (and the engine, if the session ran here after all)."""
        self.direct.close()
        if self.local is not None:
            self.local.shutdown()


def fleet_sandbox(workers: list[WorkerRow], opted_out: bool) -> SandboxInfo | None:
    """The sandbox a session handed to these workers runs its tools in: none when its user
    opted out (--no-sandbox), else the one the workers recorded, if they all agree."""
    if opted_out:
        return SandboxInfo("none", OPTED_OUT_REASON)
    found = {(w.sandbox, w.sandbox_reason or "") for w in workers}
    if len(found) != 1:
        return None
    kind, reason = found.pop()
    return SandboxInfo(kind, reason) if kind else None  # type: ignore[arg-type]


async def stop_session(host: Any, session_id: str, why: str) -> None:
    """Stop a session whose run is given up; what was done stays in the catalog, resumable.

    With the engine running here, its workflows are cancelled here; else (the session runs
    on a fleet worker) the tree is cancelled in the catalog and its worker stops them."""
    import asyncio
    import logging

    # Cancelled steps make the engine log warnings; the caller says what happened.
    logging.getLogger("dbos").setLevel(logging.ERROR)
    try:
        if host.engine is not None and host.engine.launched:
            await asyncio.wait_for(host.cancel(session_id, why), CANCEL_WAIT_S)
        else:
            from swarmdeck.runtime.tree import cancel_in_catalog

            await asyncio.to_thread(cancel_in_catalog, host.catalog, session_id, why)
    except Exception as exc:  # the run still ends and says how; the session may run on
        print(
            f"swarmdeck: warning: could not stop session {session_id} ({exc}); "
            f"`swarmdeck sessions cancel {session_id}` stops it",
            file=sys.stderr,
        )


def _warm_up() -> None:
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)


def _cancel_in_catalog(settings: Settings, session_id: str, why: str) -> None:
    from swarmdeck.catalog.catalog import Catalog
    from swarmdeck.runtime.tree import cancel_in_catalog
    from swarmdeck.secrets.redact import load_redactor
    from swarmdeck.secrets.store import CredentialStore

    redactor = load_redactor(CredentialStore(settings.credentials_dir))
    catalog = Catalog.open(settings.store_url, redactor.redact)
    try:
        cancel_in_catalog(catalog, session_id, why)
    finally:
        catalog.engine.dispose()


def fleet_driver(
    settings: Settings, redact: Any, *, require_workers: bool = True
) -> FleetDriver | None:
    """A FleetDriver when a live worker serves the store (or, not `require_workers`, when
    the store exists at all), else None: run here."""
    direct = DirectCatalog.open_existing(settings.store_url, redact)
    if direct is None:
        return None
    driver = FleetDriver(settings, direct)
    try:
        if require_workers:
            if not driver.live_workers():
                driver.shutdown()
                return None
        else:
            driver.direct.has_catalog()  # reading it works
    except Exception as exc:
        if not is_driver_error(exc):
            raise
        # A store that cannot be read (corrupt, unreachable): the in-process path opens it
        # and says in one line what is wrong with it.
        driver.shutdown()
        return None
    return driver
