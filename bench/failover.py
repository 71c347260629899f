"""Takeover after SIGKILL: how long until the sessions of a killed worker run again.

Three `swarmdeck worker` processes, each as if on a host of its own (SWARMDECK_HOSTNAME),
serve one PostgreSQL store (a throwaway cluster, tests/pgcluster.py). 100 sessions are
handed to the fleet; each asks for a durable wait(WAIT), and the fleet spreads them.
Once all wait, the worker holding the most is SIGKILLed. Measured: seconds from the kill
until every one of its sessions ran its next step on another worker (the first step of a
resumed execution: it claims the session, in the catalog, under a new epoch). Then every
session runs to its end, and the bench checks that nothing repeated: each model turn was
asked once, no transcript entry is doubled, each killed session ran exactly one more
execution and the others none.

Also measured (`restart`): one worker on this host holding all 100, SIGKILLed, and a new
worker started at once: seconds from starting it to every session resumed.

Five rounds each (a fresh database per round); medians. Goals (issue 17): takeover <= 5 s,
restart <= 2 s.

    python bench/failover.py [--rounds 5] [--sessions 100]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from quick import parse_with_quick

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from child_env import child_env  # noqa: E402
from fake_server import write_bench_provider  # noqa: E402
from tests.pgcluster import PgCluster, unavailable_reason  # noqa: E402

from swarmdeck.testing.fake_llm import FakeLLM  # noqa: E402
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall  # noqa: E402

WAIT = 30.0
GOAL_TAKEOVER_S = 5.0
GOAL_RESTART_S = 2.0
READY_TIMEOUT_S = 120.0


class Script:
    """Each session: wait(`wait` s), then answer; counts the turns asked per session."""

    def __init__(self, wait: float = WAIT) -> None:
        self.wait = wait
        self.asked: Counter[tuple[str, int]] = Counter()

    def __call__(self, request: FakeRequest) -> Reply:
        self.asked[(request.task, request.turn)] += 1
        if request.turn == 0:
            return Reply(tool_calls=(ReplyToolCall("wait", {"seconds": self.wait}),))
        return Reply(text="done")


def start_worker(env: dict[str, str], hostname: str, log: Path) -> subprocess.Popen[bytes]:
    """A worker as if on `hostname`, once it serves the store."""
    handle = log.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", "worker"],
        env={**env, "SWARMDECK_HOSTNAME": hostname},
        stdin=subprocess.DEVNULL,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while "worker " not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"worker on {hostname} did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return proc


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker with its process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_until(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Round:
    """One round on a fresh database: workers, sessions, a kill, the checks."""

    def __init__(self, cluster: PgCluster, fake_url: str, root: Path, n: int) -> None:
        self.url = cluster.create_database()
        self.home = root / f"home-{time.monotonic_ns()}"
        write_bench_provider(self.home, fake_url, model="fake", concurrency=1000)
        self.workdir = root / "project"
        self.workdir.mkdir(exist_ok=True)
        self.env = child_env()
        self.env.update(SWARMDECK_HOME=str(self.home), SWARMDECK_STORE=self.url)
        os.environ.update(SWARMDECK_HOME=str(self.home), SWARMDECK_STORE=self.url)
        from swarmdeck.catalog.catalog import Catalog

        self.catalog = Catalog.open(self.url)
        self.n = n
        self.procs: list[subprocess.Popen[bytes]] = []

    def worker(self, hostname: str) -> subprocess.Popen[bytes]:
        proc = start_worker(self.env, hostname, self.home / f"{hostname}-{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    def hand_over(self) -> list[str]:
        """n sessions handed to the fleet; returns once all are waiting."""
        from swarmdeck.runtime.host import Host, SessionRequest

        host = Host()
        ids = [
            host.create_session(
                SessionRequest(f"nap {i}", "bench", self.workdir, tool_names=["wait"]), fleet=True
            ).id
            for i in range(self.n)
        ]
        wait_until(
            lambda: all(s.status == "waiting" for s in self.sessions(ids)),
            READY_TIMEOUT_S,
            "every session to wait",
        )
        return ids

    def sessions(self, ids: list[str]) -> list:  # type: ignore[type-arg]
        return [self.catalog.get_session(i) for i in ids]

    def resumed(self, ids: list[str], old: dict[str, str]) -> float | None:
        """When the last of these sessions was claimed by a new execution, or None."""
        claims = []
        for record in self.sessions(ids):
            if record.executor == old[record.id]:
                return None
            claims.append(record.updated_at)
        return max(claims)

    def finish(self, ids: list[str], script: Script, killed: set[str]) -> None:
        """Every session ends, and nothing repeated."""
        wait_until(
            lambda: all(s.status == "completed" for s in self.sessions(ids)),
            script.wait + READY_TIMEOUT_S,
            "every session to end",
        )
        tasks = {s.id: s.task for s in self.sessions(ids)}
        for sid in ids:
            for turn in (0, 1):
                asked = script.asked[(tasks[sid], turn)]
                assert asked == 1, f"{sid} turn {turn} asked {asked} times"
            keys = [e.key for e in self.catalog.events(sid)]
            assert len(keys) == len(set(keys)), f"{sid}: doubled entries {keys}"
            epoch = self.catalog.get_session(sid).epoch
            assert epoch == (2 if sid in killed else 1), f"{sid}: {epoch} executions"

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                kill(proc)
        self.catalog.engine.dispose()


def takeover_round(cluster: PgCluster, fake: FakeLLM, script: Script, root: Path, n: int) -> float:
    """Three workers on three hosts; SIGKILL the busiest; seconds until its sessions run."""
    run = Round(cluster, fake.openai_base_url, root, n)
    try:
        workers = {run.worker(f"host-{c}").pid: c for c in "abc"}
        ids = run.hand_over()
        old = {s.id: s.executor for s in run.sessions(ids)}
        by_executor = Counter(old.values())
        doomed_exec, count = by_executor.most_common(1)[0]
        doomed = next(p for p in run.procs if p.pid == int(doomed_exec.split("-")[-2]))
        mine = [sid for sid, ex in old.items() if ex == doomed_exec]
        killed_at = time.time()
        kill(doomed)
        wait_until(lambda: run.resumed(mine, old) is not None, 60, "the takeover")
        seconds = run.resumed(mine, old) - killed_at  # type: ignore[operator]
        run.finish(ids, script, set(mine))
        spread = ", ".join(
            f"host-{workers[int(e.split('-')[-2])]} {c}" for e, c in by_executor.items()
        )
        print(f"  takeover: killed a worker holding {count} of {n} ({spread}); "
              f"all {count} ran again after {seconds:.2f} s")  # fmt: skip
        return seconds
    finally:
        run.close()


def restart_round(cluster: PgCluster, fake: FakeLLM, script: Script, root: Path, n: int) -> float:
    """One worker holding all; SIGKILL it and start another: seconds from that start until
    every session runs again."""
    run = Round(cluster, fake.openai_base_url, root, n)
    try:
        first = run.worker("host-a")
        ids = run.hand_over()
        old = {s.id: s.executor for s in run.sessions(ids)}
        kill(first)
        started = time.time()
        run.worker("host-a")
        wait_until(lambda: run.resumed(ids, old) is not None, 60, "the restart")
        seconds = run.resumed(ids, old) - started  # type: ignore[operator]
        run.finish(ids, script, set(ids))
        print(f"  restart: a new worker resumed all {n} sessions {seconds:.2f} s after its start")
        return seconds
    finally:
        run.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--wait", type=float, default=WAIT, help="each session's durable wait (s)")
    # The quick wait still outlasts the spreading of six sessions and the kill under load.
    args = parse_with_quick(parser, rounds=1, sessions=6, wait=6.0)
    reason = unavailable_reason()
    if reason:
        sys.exit(f"bench/failover.py needs PostgreSQL: {reason}")
    cluster = PgCluster.start()
    script = Script(args.wait)
    takeovers: list[float] = []
    restarts: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="sd-failover-") as tmp, FakeLLM(script) as fake:
            root = Path(tmp)
            for i in range(args.rounds):
                print(f"round {i + 1} of {args.rounds}", flush=True)
                script.asked.clear()
                takeovers.append(takeover_round(cluster, fake, script, root, args.sessions))
                script.asked.clear()
                restarts.append(restart_round(cluster, fake, script, root, args.sessions))
    finally:
        cluster.stop()
    takeover, restart = statistics.median(takeovers), statistics.median(restarts)
    print(
        f"\nPostgreSQL, {args.sessions} waiting sessions, medians of {args.rounds}; nothing repeated"
    )
    print(f"  restart median: {restart:.2f} s   (goal <= {GOAL_RESTART_S:g} s: "
          f"{'met' if restart <= GOAL_RESTART_S else 'NOT met'})")  # fmt: skip
    print(f"  (takeover goal <= {GOAL_TAKEOVER_S:g} s: "
          f"{'met' if takeover <= GOAL_TAKEOVER_S else 'NOT met'})")  # fmt: skip
    print(f"takeover median: {takeover:.2f} s")


if __name__ == "__main__":
    main()
