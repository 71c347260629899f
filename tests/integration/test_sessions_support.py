"""Helpers shared by the session tests (integration and chaos): scripted models written as
Python functions, waiting on the catalog, and CLI processes that tests kill with SIGKILL.

Holds no tests itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.records import TERMINAL_STATUSES, EventRecord, SessionRecord
from swarmdeck.config import load_settings
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall
from tests.cli_fork import ForkedProcess
from tests.conftest import FORK_ENV, cli_env, cli_fork_server

STARTED_RE = re.compile(r"started sub-agent (\S+)")


def call(tool_name: str, /, **arguments: Any) -> ReplyToolCall:
    """One tool call of a scripted reply."""
    return ReplyToolCall(tool_name, arguments)


def calls(*items: ReplyToolCall) -> Reply:
    """A reply made of tool calls."""
    return Reply(tool_calls=tuple(items))


def text(value: str) -> Reply:
    """A reply that ends the model's turn."""
    return Reply(text=value)


def tool_results(req: FakeRequest) -> list[str]:
    """The contents of every tool message of the request, in order."""
    return [str(m.get("content") or "") for m in req.messages if m.get("role") == "tool"]


def user_texts(req: FakeRequest) -> list[str]:
    """The texts of every user message of the request, in order (the task first)."""
    return [str(m.get("content") or "") for m in req.messages if m.get("role") == "user"]


def spawned_ids(req: FakeRequest) -> list[str]:
    """Ids of the sub-agents this conversation started, in order."""
    found: list[str] = []
    for content in tool_results(req):
        found += STARTED_RE.findall(content)
    return found


Turn = Callable[[FakeRequest], Reply]


@dataclass
class Agent:
    """A scripted agent: its turns by number; past the last turn it says `rest`."""

    turns: list[Reply | Turn]
    rest: str = "(done)"

    def reply(self, req: FakeRequest) -> Reply:
        """The reply to this request."""
        if req.turn >= len(self.turns):
            return Reply(text=self.rest)
        turn = self.turns[req.turn]
        return turn(req) if callable(turn) else turn


@dataclass
class Scripted:
    """A fake LLM script as Python: agents chosen by a substring of their task.

    Counts the requests each agent received (an LLM turn asked twice shows up here).
    """

    agents: dict[str, Agent]
    asked: dict[str, int] = field(default_factory=dict)
    asked_turns: Counter[tuple[str, int]] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, req: FakeRequest) -> Reply:
        for needle, agent in self.agents.items():
            if needle in req.task:
                with self.lock:  # the fake server answers from many threads
                    self.asked[needle] = self.asked.get(needle, 0) + 1
                    self.asked_turns[(needle, req.turn)] += 1
                return agent.reply(req)
        return Reply(text=f"(no agent for {req.task[:40]!r})")


@dataclass
class TurnLedger:
    """Which LLM turns may be asked more than once: only those asked but not stored when a
    process was killed (at-least-once). Call `killed()` after every kill, `check()` last."""

    script: Scripted
    catalog: Catalog
    # The fake LLM the killed processes talked to: `killed()` lets it serve what they sent
    # just before dying (else a turn asked at the kill is counted after the snapshot and
    # looks asked twice). None where other clients stay connected across the kill.
    server: FakeLLM | None = None
    repeats: Counter[tuple[str, int]] = field(default_factory=Counter)

    def stored(self) -> set[tuple[str, int]]:
        found: set[tuple[str, int]] = set()
        sessions = self.catalog.list_sessions(limit=10_000)
        for needle in self.script.agents:
            for s in sessions:
                if needle in s.task:
                    for ev in assistant_turns(self.catalog, s.id):
                        found.add((needle, int(ev.key.split(":")[1])))
        return found

    def killed(self) -> None:
        """A process just died: turns asked and not stored may be asked again."""
        if self.server is not None:
            self.server.settle()
        for key in set(self.script.asked_turns) - self.stored():
            self.repeats[key] += 1

    def check(self) -> None:
        """Every stored turn was asked once, plus once per kill that lost its answer."""
        stored = self.stored()
        asked = self.script.asked_turns
        assert set(asked) == stored, f"asked {sorted(asked)} but stored {sorted(stored)}"
        wrong = {k: n for k, n in asked.items() if n != 1 + self.repeats[k]}
        assert not wrong, f"turns asked too often: {wrong} (allowed repeats {self.repeats})"


def open_catalog() -> Catalog:
    """The catalog of the test's store (SWARMDECK_HOME / SWARMDECK_STORE of the test)."""
    return Catalog.open(load_settings().store_url)


def assistant_turns(catalog: Catalog, sid: str) -> list[EventRecord]:
    """The session's stored LLM turns."""
    return catalog.events(sid, kinds=["assistant"])


def wait_for(predicate: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
    """Poll a condition (sync); returns its first truthy value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or predicate}")
        time.sleep(0.02)


async def await_for(predicate: Callable[[], Any], timeout: float = 30, what: str = "") -> Any:
    """Poll a condition from async code; returns its first truthy value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or predicate}")
        await asyncio.sleep(0.02)


def status_is(catalog: Catalog, sid: str, *statuses: str) -> Callable[[], bool]:
    """A predicate: the session has one of these statuses."""
    return lambda: catalog.get_session(sid).status in statuses


def tree_of(catalog: Catalog, root_id: str) -> list[SessionRecord]:
    """Every session of a tree."""
    return catalog.list_sessions(root_id=root_id, limit=10_000)


def live(records: list[SessionRecord]) -> list[SessionRecord]:
    """The sessions that have not ended."""
    return [r for r in records if r.status not in TERMINAL_STATUSES]


# -- CLI processes -----------------------------------------------------------------------


# A CLI process a test started: exec'd, or forked by the CLI fork server.
CliProcess = subprocess.Popen[str] | ForkedProcess


def popen_cli(home: Path, *args: str, **env: str) -> CliProcess:
    """Start `python -m swarmdeck ARGS` in its own process group (so a kill takes its tools);
    forked like run_cli's (tests/cli_fork.py) unless SWARMDECK_TEST_FORK=0."""
    if os.environ.get(FORK_ENV) != "0":
        return cli_fork_server().start(list(args), cli_env(home, **env), new_session=True)
    return subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", *args],
        env=cli_env(home, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def popen_python(home: Path, script: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    """Start a Python script (an SDK program) like a CLI process."""
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        env=cli_env(home, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        cwd=str(Path(__file__).resolve().parents[2]),
    )


def sigkill(proc: CliProcess) -> None:
    """SIGKILL the process and its group; reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=20)


def finish(proc: CliProcess, timeout: float = 60) -> tuple[int, str, str]:
    """Wait for a process; (returncode, stdout, stderr). Killed on timeout."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        sigkill(proc)
        out, err = proc.communicate()
        raise AssertionError(f"process timed out after {timeout} s; stderr:\n{err}") from None
    return proc.returncode, out, err


def expect_killed(proc: CliProcess, timeout: float = 60) -> None:
    """Wait for a process that a crash point kills; fail with its output if it was not."""
    code, out, err = finish(proc, timeout)
    assert code == -signal.SIGKILL, f"expected SIGKILL, got {code}\nstdout:{out}\nstderr:{err}"


def last_json(stdout: str) -> Any:
    """The last JSON line a command printed."""
    lines = [line for line in stdout.splitlines() if line.strip().startswith(("{", "["))]
    return json.loads(lines[-1])


def rss_kib(pid: int) -> int:
    """Resident memory of a process (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")
