"""The takeover part of bench/workspace.py (a module it imports, not a bench of its own):
SIGKILL to the first resumed step of a store-workspace session, across two homes.

Two `swarmdeck worker` processes, each as if on a host of its own (its own home and
SWARMDECK_HOSTNAME; they share only the SQLite store file), and a session submitted from
a third home with `workspace: store` on the generated repository. Worker a writes a file
(a step: snapshot recorded) and is SIGKILLed while its next model turn is in flight;
worker b takes the session over once a's lease lapses, restores the files from the store
and asks that turn again. Measured: seconds from the kill to that request.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from child_env import child_env
from fake_server import write_bench_provider

from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall

READY_TIMEOUT_S = 120.0
TASK = "takeover: change one file"
CHANGED = "pkg000/mod00001.py"


class Script:
    """Turn 0 writes a file; turn 1 waits until released (the first ask is in flight at
    the kill; the second waits for the bench to look at the restored files); records when
    each turn was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, float]] = []
        self.release = threading.Event()

    def __call__(self, request: FakeRequest) -> Reply:
        self.asked.append((request.turn, time.time()))
        if request.turn == 0:
            write = {"path": CHANGED, "content": "changed = True\n"}
            return Reply(tool_calls=(ReplyToolCall("write_file", write),))
        self.release.wait(60)
        return Reply(text="done")


def _home(root: Path, name: str, base_url: str) -> Path:
    home = root / f"home-{name}"
    write_bench_provider(home, base_url, model="fake", concurrency=None)
    home.chmod(0o700)
    return home


def _worker(env: dict[str, str], home: Path, host: str) -> subprocess.Popen[bytes]:
    log = home / "worker.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", "worker"],
        env={**env, "SWARMDECK_HOME": str(home), "SWARMDECK_HOSTNAME": host},
        stdin=subprocess.DEVNULL, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    _until(lambda: "worker " in log.read_text(errors="replace"), f"worker on {host}", proc)
    return proc


def _until(predicate, what: str, proc: subprocess.Popen[bytes] | None = None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not predicate():
        if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def measure_takeover(repo: Path, work: Path) -> float:
    """Seconds from SIGKILL of the worker running the session to its first resumed step
    on the other worker, workspace restore included."""
    script = Script()
    procs: list[subprocess.Popen[bytes]] = []
    with FakeLLM(script) as fake:
        env = child_env()
        env["SWARMDECK_STORE"] = f"sqlite:///{work / 'takeover.sqlite'}"
        planner = _home(work, "planner", fake.openai_base_url)
        homes = {h: _home(work, h, fake.openai_base_url) for h in ("a", "b")}
        try:
            procs.append(_worker(env, homes["a"], "host-a"))
            sid = _submit(env, planner, repo)
            _until(lambda: sum(1 for t, _ in script.asked if t == 1) == 1, "worker a's step")
            procs.append(_worker(env, homes["b"], "host-b"))
            killed = time.time()
            _kill(procs[0])
            _until(lambda: sum(1 for t, _ in script.asked if t == 1) == 2, "the takeover")
            resumed = script.asked[-1][1]
            restored = homes["b"] / "workspaces" / "trees" / sid / CHANGED
            if restored.read_text() != "changed = True\n":
                raise RuntimeError(f"worker b's copy lacks worker a's step: {restored}")
            script.release.set()
            print(f"  takeover: b restored a's step ({CHANGED}) from the store and went on")
            return resumed - killed
        finally:
            script.release.set()
            for proc in procs:
                if proc.poll() is None:
                    _kill(proc)


def _submit(env: dict[str, str], home: Path, repo: Path) -> str:
    """Hand the session to the fleet from the planner's home; its id."""
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from swarmdeck.runtime.host import Host, SessionRequest\n"
        "req = SessionRequest(sys.argv[1], 'bench', Path(sys.argv[2]),\n"
        "                     options={'workspace': 'store'})\n"
        "print(Host().create_session(req, fleet=True).id)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, TASK, str(repo)],
        env={**env, "SWARMDECK_HOME": str(home)}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1]
