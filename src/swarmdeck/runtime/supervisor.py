"""`swarmdeck worker --processes N`: keep N worker processes running on this machine.

Each child is a plain `swarmdeck worker` with its own executor id and lease; the
supervisor only starts, restarts and stops them. It registers in sd_supervisors and scales
to the `processes` count found there at each beat, so a tool (scale_workers) or a person
can change the count of a running fleet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.supervisors import SupervisorRegistry
from swarmdeck.config import load_settings

BEAT_SECONDS = 1.0
# A child that dies sooner than this after its start is restarted after a growing delay.
QUICK_DEATH_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 30.0
STOP_WAIT_SECONDS = 10.0
MAX_PROCESSES = 64


@dataclass
class Child:
    """One supervised worker process."""

    proc: subprocess.Popen[bytes]
    started_at: float = field(default_factory=time.monotonic)


@dataclass
class Supervisor:
    """Starts, restarts and stops worker processes to keep the wanted count."""

    say: Callable[[str], None]
    argv: list[str] = field(default_factory=lambda: [sys.executable, "-m", "swarmdeck", "worker"])
    children: list[Child] = field(default_factory=list)
    backoff_s: float = 0.0
    restart_at: float = 0.0

    def spawn(self) -> None:
        """Start one worker process."""
        proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL)
        self.children.append(Child(proc))
        self.say(f"supervisor: started worker process {proc.pid}")

    def reap(self) -> None:
        """Forget children that exited; a quick death delays the next start."""
        now = time.monotonic()
        for child in [c for c in self.children if c.proc.poll() is not None]:
            self.children.remove(child)
            code = child.proc.returncode
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            self.say(f"supervisor: worker process {child.proc.pid} ended ({how}); restarting")
            if now - child.started_at < QUICK_DEATH_SECONDS:
                self.backoff_s = min(MAX_BACKOFF_SECONDS, max(1.0, self.backoff_s * 2))
                self.restart_at = now + self.backoff_s
            else:
                self.backoff_s = 0.0

    def scale(self, wanted: int) -> None:
        """Start or stop processes until `wanted` run (starts wait out a backoff)."""
        wanted = max(0, min(MAX_PROCESSES, wanted))
        while len(self.children) > wanted:
            child = self.children.pop()  # the newest goes first
            self.say(f"supervisor: stopping worker process {child.proc.pid} (scaling to {wanted})")
            self._stop_one(child)
        while len(self.children) < wanted and time.monotonic() >= self.restart_at:
            self.spawn()

    def stop_all(self) -> None:
        """SIGTERM every child, then SIGKILL what is left after a grace period."""
        for child in self.children:
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        for child in self.children:
            try:
                child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()
        self.children.clear()

    def _stop_one(self, child: Child) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.proc.send_signal(signal.SIGTERM)
        # Reaped later by `reap`'s poll; a stopped child is not restarted (it left the list).
        threading.Thread(target=child.proc.wait, daemon=True).start()


def supervise(processes: int, say: Callable[[str], None]) -> int:
    """Keep `processes` workers running until SIGINT/SIGTERM; returns the exit code."""
    settings = load_settings()
    catalog = Catalog.open(settings.store_url)
    registry = SupervisorRegistry(catalog.engine)
    supervisor_id = f"{settings.hostname}-{os.getpid()}-sup-{uuid.uuid4().hex[:6]}"
    registry.register(supervisor_id, settings.hostname, processes)
    say(f"supervisor {supervisor_id}: keeping {processes} worker process(es)")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    sup = Supervisor(say)
    wanted = processes
    try:
        while not stop.is_set():
            sup.reap()
            try:
                found = registry.beat(supervisor_id)
            except Exception as exc:  # the store is away: keep what runs
                say(f"supervisor: cannot reach the store ({type(exc).__name__}); keeping {wanted}")
                found = wanted
            if found is not None and found != wanted:
                say(f"supervisor: scaling from {wanted} to {found} worker process(es)")
                wanted = found
            sup.scale(wanted)
            stop.wait(BEAT_SECONDS)
    finally:
        sup.stop_all()
        with contextlib.suppress(Exception):
            registry.stop(supervisor_id)
        catalog.engine.dispose()
    return 0
