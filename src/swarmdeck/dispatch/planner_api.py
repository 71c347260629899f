"""What a planner can do through swarmdeck's MCP server: dispatch and fan out bounded tasks,
wait for their verdicts, and read, message, answer and cancel sessions. Results are the
contract's JSON objects (docs/contract.md, "MCP tools").

A long operation returns at once: `dispatch` and `fanout` answer with each job's `started`
object, and `session_wait` waits for the verdict. Each job runs as a `swarmdeck dispatch`
process (the fanout's machinery), so a worker that dies still leaves a verdict, and the
verdict is also found on disk by a server started later.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

from swarmdeck.catalog.records import TERMINAL_STATUSES, SessionRecord
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.config import Settings, load_settings
from swarmdeck.dispatch.fanout import Fanout, Job, check_jobs
from swarmdeck.dispatch.verdict import VERDICT_TYPE, error_line
from swarmdeck.errors import NotFoundError, ToolError, UsageError
from swarmdeck.runtime.host import Host
from swarmdeck.views.detail import session_detail
from swarmdeck.views.fleet import FleetView

MAX_JOBS = 16
MAX_WAIT_S = 600.0
WAIT_POLL_S = 0.25
PENDING_TYPE = "swarmdeck.pending"
SESSION_TYPE = "swarmdeck.session"
ARTIFACT_MAX_BYTES = 1_000_000


class PlannerApi:
    """The planner's operations over one store (one per `swarmdeck mcp serve`)."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or load_settings()
        self._host: Host | None = None
        # Runs started by this server: session id -> the task that yields its verdict, and
        # whether it carries its job's name (a fanout's does, a dispatch's does not).
        self.runs: dict[str, tuple[asyncio.Task[dict[str, Any]], bool]] = {}

    @property
    def host(self) -> Host:
        """The store's sessions (no engine: this process runs none of them)."""
        if self._host is None:
            self._host = Host(self.settings)
        return self._host

    # -- long operations ------------------------------------------------------------------

    async def dispatch(self, job: dict[str, Any]) -> dict[str, Any]:
        """Start one job; its `started` object (or the verdict of a job that could not
        start)."""
        checked = _job(0, job)
        await asyncio.to_thread(check_jobs, [checked], self.settings)
        [started] = await self._start([checked], labelled=False)
        return started

    async def fanout(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Start several jobs at once; their `started` objects in job order, each with `job`."""
        if not jobs:
            raise UsageError("no jobs", "pass at least one job")
        if len(jobs) > MAX_JOBS:
            raise UsageError(f"{len(jobs)} jobs at once", f"at most {MAX_JOBS}; split them")
        checked = [_job(i, raw) for i, raw in enumerate(jobs)]
        await asyncio.to_thread(check_jobs, checked, self.settings)
        return await self._start(checked)

    async def _start(self, jobs: list[Job], labelled: bool = True) -> list[dict[str, Any]]:
        """Start the jobs; their started objects (with `job` when `labelled`: a fanout's)."""
        loop = asyncio.get_running_loop()
        started: list[asyncio.Future[dict[str, Any]]] = [loop.create_future() for _ in jobs]
        tasks: list[asyncio.Task[dict[str, Any]]] = []

        def on_started(index: int, doc: dict[str, Any]) -> None:
            self.runs[str(doc.get("session_id"))] = (tasks[index], labelled)
            if not started[index].done():
                started[index].set_result({"job": jobs[index].name, **doc} if labelled else doc)

        fan = Fanout(jobs, len(jobs), self.settings, on_started, hold_by_provider=False)
        for index in range(len(jobs)):
            task = loop.create_task(fan.run_job(index))

            def ended(t: asyncio.Task[dict[str, Any]], index: int = index) -> None:
                # Ended before it started (refused, crashed): its verdict is the answer.
                if not started[index].done():
                    if t.cancelled():
                        started[index].cancel()
                    elif t.exception() is not None:
                        started[index].set_exception(t.exception())  # type: ignore[arg-type]
                    else:
                        started[index].set_result(_labelled(t.result(), labelled))

            task.add_done_callback(ended)
            tasks.append(task)
        return list(await asyncio.gather(*started))

    async def session_wait(self, session_id: str, timeout_s: float) -> dict[str, Any]:
        """The outcome of a session once it ends (its verdict for a dispatched task), or a
        `pending` object when it is still running after `timeout_s`."""
        timeout_s = min(max(0.0, timeout_s), MAX_WAIT_S)
        sid = await self._resolve(session_id)
        began = time.monotonic()
        if sid in self.runs:
            run, labelled = self.runs[sid]
            done, _ = await asyncio.wait({run}, timeout=timeout_s)
            if done:
                return _labelled(run.result(), labelled)
            return await self._pending(sid, time.monotonic() - began)
        while True:
            record = await asyncio.to_thread(self.host.catalog.get_session, sid)
            if record.status in TERMINAL_STATUSES:
                found = await asyncio.to_thread(self._outcome_on_disk, record)
                if found is not None:
                    return found
                detail = await asyncio.to_thread(
                    session_detail, self.host.catalog, self._registry(), sid
                )
                return {"type": SESSION_TYPE, **detail.document(events=False)}
            if time.monotonic() - began >= timeout_s:
                return await self._pending(sid, time.monotonic() - began)
            await asyncio.sleep(WAIT_POLL_S)

    def _outcome_on_disk(self, record: SessionRecord) -> dict[str, Any] | None:
        """An ended session's outcome a run left on disk (a dispatch's verdict), or None."""
        return _verdict_on_disk(self.settings.runs_dir / record.id)

    async def _pending(self, sid: str, waited: float) -> dict[str, Any]:
        record = await asyncio.to_thread(self.host.catalog.get_session, sid)
        return {
            "type": PENDING_TYPE,
            "session_id": sid,
            "status": record.status,
            "waited_s": round(waited, 3),
            "hint": "call session_wait again, or session_show for its progress",
        }

    # -- sessions ---------------------------------------------------------------------------

    async def sessions_list(self, status: str | None, limit: int) -> dict[str, Any]:
        """The newest sessions (optionally of one status)."""
        view = FleetView(self.host.catalog, self._registry())
        rows = await asyncio.to_thread(view.newest, max(1, min(limit, 500)), status or None)
        return {"sessions": [r.summary() for r in rows]}

    def _registry(self) -> WorkerRegistry:
        """The fleet's executors, as `sessions ls` reads them (for `orphaned` and workers)."""
        return WorkerRegistry(
            self.host.catalog.engine, self.settings.hostname, self.settings.lease_seconds
        )

    async def session_show(self, session_id: str, events: int) -> dict[str, Any]:
        """A session's record, usage and result, and its last `events` transcript entries."""
        sid = await self._resolve(session_id)

        def read() -> dict[str, Any]:
            doc = session_detail(self.host.catalog, self._registry(), sid).document()
            kept = max(0, events)
            doc["events_total"] = len(doc["events"])
            doc["events"] = doc["events"][-kept:] if kept else []
            return doc

        return await asyncio.to_thread(read)

    async def session_send(self, session_id: str, text: str, msg_id: str | None) -> dict[str, Any]:
        """Deliver a message to a session's durable inbox (a retried id is delivered once)."""
        _require_text(text, "message")
        sid = await self._resolve(session_id)
        fresh = await asyncio.to_thread(self.host.send, sid, text, msg_id)
        return {"session_id": sid, "delivered": True, "duplicate": not fresh}

    async def session_answer(
        self, session_id: str, text: str, msg_id: str | None
    ) -> dict[str, Any]:
        """Answer a session's ask_user question."""
        _require_text(text, "answer")
        sid = await self._resolve(session_id)
        fresh = await asyncio.to_thread(self.host.answer, sid, text, msg_id)
        return {"session_id": sid, "delivered": True, "duplicate": not fresh}

    async def session_cancel(self, session_id: str) -> dict[str, Any]:
        """Cancel a session and its sub-agents (the catalog records it; DBOS's client stops
        their workflows wherever they run)."""
        sid = await self._resolve(session_id)
        return {"cancelled": await asyncio.to_thread(self.host.cancel_offline, sid)}

    async def artifact_get(self, link: str) -> dict[str, Any]:
        """An artifact's content: text as it is, anything else in base64."""
        from swarmdeck.tools.builtins.artifacts import load_artifact, parse_link

        try:
            sid, name = parse_link(link)
            data = await asyncio.to_thread(load_artifact, self.host.catalog, sid, name)
        except ToolError as exc:
            raise NotFoundError(
                exc.message, "artifact links look like artifact://SESSION/NAME"
            ) from None
        if len(data) > ARTIFACT_MAX_BYTES:
            raise UsageError(
                f"{link} is {len(data)} bytes", f"fetch it with `swarmdeck artifacts get {link}`"
            )
        try:
            return {"link": link, "bytes": len(data), "encoding": "utf-8", "content": data.decode()}
        except UnicodeDecodeError:
            encoded = base64.b64encode(data).decode()
            return {"link": link, "bytes": len(data), "encoding": "base64", "content": encoded}

    async def list_models(self) -> dict[str, Any]:
        """The exact provider:model names dispatch accepts now (ready providers)."""
        models = await asyncio.to_thread(self.host.services.available_models)
        return {"models": [m.as_dict() for m in models]}

    def error_line(self, message: str, hint: str) -> str:
        """The contract's error line."""
        return error_line(message, hint)

    async def _resolve(self, session_id: str) -> str:
        return await asyncio.to_thread(self.host.catalog.resolve_session_id, session_id)

    async def close(self) -> None:
        """Stop following runs (they go on; their verdicts land on disk)."""
        for task, _ in self.runs.values():
            task.cancel()


def _job(index: int, raw: dict[str, Any]) -> Job:
    """A job from a tool's arguments (the fanout's own model validates it)."""
    from pydantic import ValidationError

    fields = {k: v for k, v in raw.items() if v is not None}
    fields.setdefault("name", f"job-{index + 1}")
    if fields.get("task") is None and fields.get("task_file") is None:
        raise UsageError(f"job {fields['name']}: no task", "pass `task` (text) or `task_file`")
    try:
        return Job.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"job {fields['name']}: {where}: {first['msg']}", "fix the job") from None


def _labelled(doc: dict[str, Any], labelled: bool) -> dict[str, Any]:
    """A fanout's verdict names its job; a dispatch's is the contract's verdict as it is."""
    return doc if labelled else {k: v for k, v in doc.items() if k != "job"}


def _require_text(text: str, what: str) -> None:
    if not text.strip():
        raise UsageError(f"the {what} is empty; nothing was sent", "give it some text")


def _verdict_on_disk(session_dir: Path) -> dict[str, Any] | None:
    """The newest verdict a dispatch of this session wrote beside its log (resumes write
    theirs in resume-N/)."""
    found = [session_dir / "verdict.json", *session_dir.glob("resume-*/verdict.json")]
    found = [p for p in found if p.is_file()]
    if not found:
        return None
    newest = max(found, key=lambda p: p.stat().st_mtime)
    try:
        doc = json.loads(newest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("type") == VERDICT_TYPE else None
