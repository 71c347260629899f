"""The planner's `swarm` operation (swarmdeck's MCP server): a swarm runs as a
`swarmdeck swarm --json --quiet` child process, its task and plan in 0600 files, never on
argv. The child prints its `swarmdeck.swarm_started` line on stderr as soon as the
coordinator's session exists, so the tool answers at once; `session_wait` then returns the
`swarmdeck.swarm` object the child prints on stdout, or, for a server started later, the
same object rebuilt from the catalog."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.dispatch.fanout import LINE_LIMIT
from swarmdeck.dispatch.planner_api import PlannerApi
from swarmdeck.dispatch.verdict import ERROR_TYPE
from swarmdeck.errors import StoreError, SwarmdeckError, UsageError
from swarmdeck.filemodes import private_dir, write_private
from swarmdeck.swarm.report import REPORT_TYPE, STARTED_TYPE, build_report, is_swarm

# How long the child may take to store the coordinator's session (it checks the team, the
# models and the plan first).
START_TIMEOUT_S = 120.0


class SwarmPlannerApi(PlannerApi):
    """The planner's operations, with swarms."""

    async def swarm(self, args: dict[str, Any]) -> dict[str, Any]:
        """Start a swarm; its `swarmdeck.swarm_started` object, or the refusal of bad input."""
        task = args.get("task")
        if not isinstance(task, str) or not task.strip():
            raise UsageError("the task is empty", "say what the swarm should do in `task`")
        folder = self._run_folder()
        argv = [sys.executable, "-m", "swarmdeck", "swarm", "--json", "--quiet"]
        argv += ["--task-file", str(_private_file(folder / "task.md", task))]
        if args.get("plan") is not None:
            plan = json.dumps(args["plan"], ensure_ascii=False)
            argv += ["--plan", str(_private_file(folder / "plan.json", plan))]
        for key, flag in (
            ("workdir", "--workdir"),
            ("team", "--team"),
            ("max_members", "--max-members"),
            ("model", "--model"),
            ("timeout", "--timeout"),
        ):
            if args.get(key) is not None:
                argv += [flag, str(args[key])]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=LINE_LIMIT,
        )
        started: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        stderr_log = asyncio.ensure_future(_follow_stderr(proc, folder / "stderr.log", started))
        try:
            doc = await asyncio.wait_for(asyncio.shield(started), START_TIMEOUT_S)
        except TimeoutError:
            # Its stderr ends with the kill; the future's _NotStarted then goes unread.
            started.add_done_callback(lambda f: f.cancelled() or f.exception())
            proc.kill()
            raise StoreError(
                f"the swarm did not start within {START_TIMEOUT_S:g}s",
                f"see {folder / 'stderr.log'}",
            ) from None
        except _NotStarted:
            await stderr_log
            raise _refusal(await _stdout_object(proc), folder) from None
        sid = str(doc["session_id"])
        self.runs[sid] = (asyncio.ensure_future(self._outcome(proc, sid, stderr_log)), False)
        return doc

    async def _outcome(
        self, proc: asyncio.subprocess.Process, sid: str, stderr_log: asyncio.Future[None]
    ) -> dict[str, Any]:
        """The child's swarm object; rebuilt from the catalog should it print none (killed)."""
        doc = await _stdout_object(proc)
        await stderr_log
        if doc is not None and doc.get("type") == REPORT_TYPE:
            return doc
        return await asyncio.to_thread(build_report, self.host.catalog, sid)

    def _outcome_on_disk(self, record: SessionRecord) -> dict[str, Any] | None:
        """A swarm's object comes from the catalog (a dispatch's verdict from its run dir)."""
        if is_swarm(record):
            return build_report(self.host.catalog, record.id)
        return super()._outcome_on_disk(record)

    def _run_folder(self) -> Path:
        folder = self.settings.runs_dir / f"swarm-{int(time.time() * 1000):x}-{os.getpid()}"
        try:
            private_dir(folder)
        except OSError as exc:
            raise StoreError(
                f"cannot create the swarm's run directory {folder}: {exc.strerror or exc}",
                "the swarmdeck home (SWARMDECK_HOME) must be a writable directory",
            ) from None
        return folder


class _NotStarted(Exception):
    """The child ended without a started line."""


def _private_file(path: Path, text: str) -> Path:
    """`text` in a file only its owner reads."""
    write_private(path, text.encode("utf-8"))
    return path


async def _follow_stderr(
    proc: asyncio.subprocess.Process, log: Path, started: asyncio.Future[dict[str, Any]]
) -> None:
    """Copy the child's stderr to `log`, answering `started` with its started line."""
    assert proc.stderr is not None
    with log.open("wb") as out:
        while raw := await proc.stderr.readline():
            out.write(raw)
            out.flush()
            if started.done():
                continue
            with contextlib.suppress(ValueError):
                doc = json.loads(raw)
                if isinstance(doc, dict) and doc.get("type") == STARTED_TYPE:
                    started.set_result(doc)
    if not started.done():
        started.set_exception(_NotStarted())


async def _stdout_object(proc: asyncio.subprocess.Process) -> dict[str, Any] | None:
    """The last JSON object the child printed on stdout, once it has exited."""
    assert proc.stdout is not None
    out = await proc.stdout.read()
    await proc.wait()
    for line in reversed(out.decode("utf-8", errors="replace").splitlines()):
        with contextlib.suppress(ValueError):
            doc = json.loads(line)
            if isinstance(doc, dict):
                return doc
    return None


def _refusal(doc: dict[str, Any] | None, folder: Path) -> SwarmdeckError:
    """The child's refusal as an error (its message and hint, as it printed them)."""
    if doc is not None and doc.get("type") == ERROR_TYPE:
        return UsageError(str(doc.get("error")), str(doc.get("hint") or ""))
    return StoreError(
        "the swarm ended before its coordinator started", f"see {folder / 'stderr.log'}"
    )
