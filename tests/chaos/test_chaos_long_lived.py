"""A long-lived cron session: 1,000 iterations at a tiny interval, rolling over into a fresh
workflow every 50. Killed with SIGKILL at iteration ~100 and ~900, it is taken over by a
fresh process with about the same work both times, and the process's memory stays flat."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply
from swarmdeck.testing.tool_search import searching
from tests.conftest import write_provider
from tests.integration.test_sessions_support import (
    call,
    calls,
    finish,
    open_catalog,
    popen_cli,
    rss_kib,
    text,
)

pytestmark = pytest.mark.chaos

ITERATIONS = 1000
ROLLOVER = 50
FIRST_KILL = 100  # LLM calls of the first process (the 100th is lost with it)
SECOND_KILL = 800  # LLM calls of the second process


def ticker(req: FakeRequest) -> Reply:
    """Turn 0 sets a 1 ms cron; every tick answers; tick 1,000 cancels the cron."""
    if req.turn == 0:
        return calls(call("cron", seconds=0.001, reason="sweep"))
    if req.turn < ITERATIONS:
        return text(f"swept {req.turn}")
    if req.turn == ITERATIONS:
        return calls(call("cancel_cron"))
    return text("sweeper stopped")


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    """One process running the session: when it started, how it went."""

    proc: subprocess.Popen[str]
    started: float
    turns_before: int
    first_new_turn_at: float | None = None
    takeover_cpu: float | None = None  # CPU seconds the process used until its first new turn
    samples: dict[int, tuple[int, float]] = field(default_factory=dict)  # turns: RSS, CPU

    @property
    def takeover_seconds(self) -> float:
        assert self.first_new_turn_at is not None
        return self.first_new_turn_at - self.started


def watch(run: Run, catalog: Catalog, sid: str, fake_llm: FakeLLM, at: tuple[int, ...]) -> None:
    """Follow the process until it exits: its first new turn; RSS and CPU at turn counts."""
    wanted = list(at)
    while run.proc.poll() is None:
        turns = _turns(catalog, sid)
        if run.first_new_turn_at is None and turns > run.turns_before:
            run.first_new_turn_at = time.monotonic()
            run.takeover_cpu = _cpu_or_none(run.proc.pid)
        while wanted and turns >= wanted[0]:
            try:
                run.samples[wanted.pop(0)] = (rss_kib(run.proc.pid), cpu_seconds(run.proc.pid))
            except (FileNotFoundError, ProcessLookupError):
                break
        if len(fake_llm.requests) > 200:
            fake_llm.reset_stats()  # the fake server keeps every request: keep this test lean
        time.sleep(0.05)


def _cpu_or_none(pid: int) -> float | None:
    try:
        return cpu_seconds(pid)
    except (FileNotFoundError, ProcessLookupError):
        return None


def _turns(catalog: Catalog, sid: str) -> int:
    ev = schema.events
    with catalog.engine.connect() as conn:
        return conn.execute(
            sa.select(sa.func.count())
            .select_from(ev)
            .where(ev.c.session_id == sid, ev.c.kind == "assistant")
        ).scalar_one()


@pytest.mark.timeout(480)  # ~80 s alone; the suite shares the cores with other tests
def test_long_lived_cron_session_stays_flat(sd_home: Path, workdir: Path, fake_llm) -> None:
    # On the embedded store only (the `store` fixture would run it on PostgreSQL too): it is
    # the slowest test here, and the chaos tests already cover takeover on both stores.
    # The Anthropic wire format: through the OpenAI SDK every request re-validates the whole
    # conversation (~0.17 ms a message), so turn n costs O(n) and 1,000 turns take minutes.
    write_provider(sd_home, "fake", fake_llm.anthropic_base_url, kind="anthropic")
    fake_llm.set_script(searching(ticker))  # cron is deferred to the vendor's tool search
    options = {"rollover_iterations": ROLLOVER, "max_turns": 2 * ITERATIONS}
    sid = (
        Host().create_session(SessionRequest("sweep forever", "fake", workdir, options=options)).id
    )
    catalog = open_catalog()
    runs: list[Run] = []
    t0 = time.monotonic()
    for crash, rss_at in (
        (f"llm.after:{FIRST_KILL}", (20, 90)),
        (f"llm.after:{SECOND_KILL}", (200, 300, 750, 850)),
        (None, (950,)),
    ):
        env = {"SWARMDECK_CRASH_AT": crash} if crash else {}
        run = Run(
            popen_cli(sd_home, "sessions", "resume", sid, **env),
            time.monotonic(),
            _turns(catalog, sid),
        )
        watch(run, catalog, sid, fake_llm, rss_at)
        code, out, err = finish(run.proc)
        runs.append(run)
        if crash:
            assert code == -9, err
    total = time.monotonic() - t0
    assert code == 0, err
    assert out.strip() == "sweeper stopped"

    record = catalog.get_session(sid)
    assert record.status == "completed"
    assert _turns(catalog, sid) == ITERATIONS + 2
    ticks = catalog.events(sid, kinds=["timer"])
    assert len(ticks) == ITERATIONS - 1
    assert record.generation >= ITERATIONS // ROLLOVER - 1

    takeover = [r.takeover_seconds for r in runs[1:]]
    takeover_cpu = [r.takeover_cpu for r in runs[1:]]
    samples = {k: v for r in runs for k, v in r.samples.items()}
    rss = {k: v[0] for k, v in samples.items()}
    early = (samples[300][1] - samples[200][1]) / 100 * 1000
    late = (samples[850][1] - samples[750][1]) / 100 * 1000
    print(
        f"\n1,000 iterations in {total:.1f} s; takeover at ~100: {takeover[0]:.2f} s, "
        f"at ~900: {takeover[1]:.2f} s (CPU {takeover_cpu[0]:.2f} s, {takeover_cpu[1]:.2f} s); RSS KiB by turn {rss}; worker CPU per turn "
        f"{early:.0f} ms at turns 200-300, {late:.0f} ms at 750-850"
    )
    # The work, not the wall clock: the suite shares two cores with other tests, and a
    # takeover that waits for a core is no slower a takeover. The later one reads a longer
    # conversation (the session keeps it until its window fills), hence the allowance.
    assert takeover_cpu[0] is not None and takeover_cpu[1] is not None, takeover_cpu
    assert takeover_cpu[1] < takeover_cpu[0] * 1.5 + 0.5, takeover_cpu
    assert rss[850] < rss[200] * 1.25, rss
