"""One run of an external runner for a session: its key proxy, its private config in a
per-run home, its process in the mode's sandbox, its events into the transcript."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmdeck.catalog.records import SessionRecord
from swarmdeck.config import sandbox_opted_out
from swarmdeck.runners import install
from swarmdeck.runners.adapters import ADAPTERS
from swarmdeck.runners.base import Access, Adapter, Endpoint, Step
from swarmdeck.runners.key_proxy import KeyProxy
from swarmdeck.runners.process import run_streaming
from swarmdeck.runners.transcript import TranscriptWriter
from swarmdeck.runtime.budget import check_budget
from swarmdeck.runtime.services import services
from swarmdeck.runtime.turn_watch import TurnWatch
from swarmdeck.tools.sandbox import confine, sandbox_in_force

RUNNER_DIR = "runner"
LOG_NAME = "runner.log"


def opted_out(record: SessionRecord) -> bool:
    """Whether the session's user accepts running without a sandbox (flag or home)."""
    return bool(record.options.get("no_sandbox")) or sandbox_opted_out()


@dataclass(frozen=True)
class RunOutcome:
    """What one run of the runner left: its exit, its last text, its own session id."""

    exit_code: int
    final_text: str
    runner_session: str | None
    stderr_tail: str
    # Why the run was stopped for its budget (None: it was not).
    budget: str | None = None
    # Stopped at the session's max_turns, as the built-in loop stops (verdict
    # step_capped_partial).
    capped: bool = False


class BudgetSpent(Exception):
    """A budget of the session (or an ancestor's) was spent while the runner ran."""


class TurnsSpent(Exception):
    """The runner answered the session's max_turns times and wanted to go on."""


@dataclass
class RunnerLaunch:
    """Everything one run needs, resolved from the session on this host."""

    record: SessionRecord
    generation: int
    adapter: Adapter
    binary: Path
    run_dir: Path

    @classmethod
    def for_session(cls, record: SessionRecord, generation: int) -> RunnerLaunch:
        """The launch of the session's runner here (refusal_here checked it exists)."""
        svc = services()
        name = record.options["runner"]
        binary = install.status(svc.settings.home, name).binary
        assert binary is not None
        # As the sandbox shows it: bound at its real path (the home may hold a symlink).
        binary = Path(os.path.realpath(binary))
        # Kept across runs: the runner's own session state lives in its home (resume).
        run_dir = svc.settings.runs_dir / record.id / RUNNER_DIR
        run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return cls(record, generation, ADAPTERS[name], binary, run_dir)

    @property
    def install_root(self) -> Path:
        """The runner's own install, shown read-only to its process."""
        home = services().settings.home
        return Path(os.path.realpath(install.runner_dir(home, self.adapter.name)))

    @property
    def turn_cap(self) -> int:
        """The session's max_turns (0: none)."""
        return int(self.record.options.get("max_turns") or 0)

    @property
    def access(self) -> Access:
        """The mode's access: only the code modes write."""
        return Access(self.record.mode, self.record.mode == "code")

    async def run(self, prompt: str, resume: str | None) -> RunOutcome:
        """Run the runner to its end, writing its events as they come."""
        svc = services()
        config, model = svc.provider_for(self.record.model)
        proxy = KeyProxy(
            config.base_url, self.adapter.wire, lambda: svc.credentials.get(config.key)
        )
        await proxy.start()
        try:
            endpoint = Endpoint(proxy.base_url, proxy.token, model)
            await asyncio.to_thread(
                self.adapter.prepare, self.run_dir / "home", endpoint, self.access
            )
            writer = TranscriptWriter(self.record.id, config.key, model, await self._next_turn())
            if self.turn_cap:
                proxy.turns_left = self.turn_cap - writer.turn
            return await self._run_process(prompt, resume, writer, proxy)
        finally:
            await proxy.close()

    async def _run_process(
        self, prompt: str, resume: str | None, writer: TranscriptWriter, proxy: KeyProxy
    ) -> RunOutcome:
        svc = services()
        sandbox = await asyncio.to_thread(sandbox_in_force, opted_out(self.record))
        argv = self.adapter.argv(self.binary, prompt, resume, self.access)
        confined = await asyncio.to_thread(
            confine, argv, workdir=Path(self.record.workdir), run_dir=self.run_dir,
            writable=self.access.writes, network=True,
            readable=[self.install_root], sandbox=sandbox,
        )  # fmt: skip
        parser = self.adapter.parser()
        watch = TurnWatch(self.record.id, writer.turn, self.generation)

        cap = self.turn_cap

        async def on_event(event: dict[str, Any]) -> None:
            await watch.chunk()
            for item in parser.feed(event):
                await writer.write(item)  # every response is kept: its tokens were spent
                if isinstance(item, Step):
                    await self._check_budget()
                    if cap and writer.turn >= cap and item.tool_calls:
                        # The cap's response wants more: stopped before its calls run.
                        raise TurnsSpent

        try:
            done = await run_streaming(
                confined, Path(self.record.workdir), on_event, self.run_dir / LOG_NAME,
                svc.redactor.redact,
            )  # fmt: skip
        except BudgetSpent as spent:
            # The runner was stopped (run_streaming stops it on any exception).
            return RunOutcome(-1, writer.final_text, writer.runner_session, "", str(spent))
        except TurnsSpent:
            return RunOutcome(-1, writer.final_text, writer.runner_session, "", capped=True)
        finally:
            # What a stopped run said before it stopped stays in the transcript.
            for item in parser.finish():
                await writer.write(item)
        if proxy.capped:  # the runner asked past the cap, and its own output had not said so
            return RunOutcome(-1, writer.final_text, writer.runner_session, "", capped=True)
        return RunOutcome(done.code, writer.final_text, writer.runner_session, done.stderr_tail)

    async def _check_budget(self) -> None:
        """After each response: the session's budgets, as the built-in loop checks them at
        each turn boundary (a warning at 80 %, the run stopped when spent)."""
        exceeded = await asyncio.to_thread(check_budget, self.record.id)
        if exceeded:
            raise BudgetSpent(exceeded)

    async def _next_turn(self) -> int:
        """The next turn number: runs of the runner number their responses on."""
        catalog = services().catalog
        events = await asyncio.to_thread(catalog.events, self.record.id)
        return sum(1 for e in events if e.kind == "assistant")
