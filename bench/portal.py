"""The web portal at fleet scale: first byte and full load of the sessions page, how fast
a stored event reaches an open page, and what open pages cost the server at idle.

On a store of 10,000 seeded sessions (trees of ten), a real `swarmdeck portal` process:

- the sessions page (100 lines of the tree, every branch open): time to its first byte
  and to its last, median of 20 warm loads, against the portal's own static stylesheet
  (the floor: the same server, socket and sign-in check, no store read) in the same run;
- a stored event to an open page: 20 events appended by this process to a session whose
  live stream is open, each timed from its commit to its arrival on the stream;
- idle: 50 open streams (50 sessions), the server's CPU share over 10 s from
  /proc/PID/stat, against the same server with no stream open.

    python bench/portal.py [--sessions 10000] [--quick]

Goals (issue 37): first byte <= 200 ms, full load <= 1 s, event <= 500 ms, idle <= 5 %.
It ends with `portal: first page X ms, event Y ms, idle Z %`.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quick import parse_with_quick
from tests.ui.seed import seed_many

from swarmdeck.catalog.catalog import Catalog

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


class Server:
    """A `swarmdeck portal` process on a free port, and an operator token for it."""

    def __init__(self, home: Path) -> None:
        env = {**os.environ, "SWARMDECK_HOME": str(home)}
        env.pop("SWARMDECK_STORE", None)
        made = subprocess.run(
            [
                sys.executable,
                "-m",
                "swarmdeck",
                "portal",
                "token",
                "add",
                "bench",
                "--role",
                "operator",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        self.token = made.stdout.strip()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "swarmdeck", "portal", "--port", "0"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        found = re.match(r"portal: (http://[^/]+)/", self.proc.stdout.readline())
        assert found, "the portal printed no URL"
        parts = urlsplit(found[1])
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def timed_get(self, path: str) -> tuple[float, float]:
        """Seconds to the first byte and to the last of one GET."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        started = time.perf_counter()
        conn.request("GET", path, headers=self.headers)
        resp = conn.getresponse()
        resp.read(1)
        first = time.perf_counter() - started
        resp.read()
        last = time.perf_counter() - started
        conn.close()
        assert resp.status == 200, (path, resp.status)
        return first, last

    def open_stream(self, session_id: str) -> http.client.HTTPResponse:
        """A live transcript stream, read up to its first keep-alive or event."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        conn.request("GET", f"/s/{session_id}/stream?after=0", headers=self.headers)
        resp = conn.getresponse()
        assert resp.status == 200
        return resp

    def stop(self) -> None:
        """End the portal."""
        self.proc.terminate()
        self.proc.wait(10)


def page_loads(server: Server, rounds: int) -> tuple[float, float, float, float]:
    """The first (cold) load of the sessions page, then the median first byte and full
    load of warm ones, and the floor's full load (ms)."""
    cold = server.timed_get("/sessions")[1]  # the first load reads the whole store once
    pages = [server.timed_get(f"/sessions?page={1 + n % 5}") for n in range(rounds)]
    floor = [server.timed_get("/static/portal.css") for _ in range(rounds)]
    ms = 1000.0
    return (
        cold * ms,
        statistics.median(p[0] for p in pages) * ms,
        statistics.median(p[1] for p in pages) * ms,
        statistics.median(f[1] for f in floor) * ms,
    )


def event_latency(server: Server, catalog: Catalog, session_id: str, rounds: int) -> list[float]:
    """Milliseconds from an event's commit to its arrival on an open stream."""
    stream = server.open_stream(session_id)
    arrived: dict[str, float] = {}
    marker = re.compile(rb"bench-event-(\d+)")

    def read() -> None:
        for line in stream:
            found = marker.search(line)
            if found:
                arrived.setdefault(found[1].decode(), time.perf_counter())

    threading.Thread(target=read, daemon=True).start()
    time.sleep(1.0)  # the stream's first read has passed
    sent: dict[str, float] = {}
    for n in range(rounds):
        key = str(n)
        catalog.append_event(session_id, f"bench-{n}", "user", {"text": f"bench-event-{n}"})
        sent[key] = time.perf_counter()
        deadline = time.monotonic() + 10
        while key not in arrived and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(0.05)
    missing = [k for k in sent if k not in arrived]
    assert not missing, f"events never reached the page: {missing}"
    return [(arrived[k] - sent[k]) * 1000 for k in sent]


def idle_share(server: Server, ids: list[str], streams: int, seconds: float) -> tuple[float, float]:
    """The server's CPU share (%) over `seconds`: with no stream, then with `streams` open."""

    def share() -> float:
        before, started = cpu_seconds(server.proc.pid), time.monotonic()
        time.sleep(seconds)
        return 100 * (cpu_seconds(server.proc.pid) - before) / (time.monotonic() - started)

    bare = share()
    opened = [server.open_stream(sid) for sid in ids[:streams]]
    time.sleep(2.0)  # each stream's first read is done
    loaded = share()
    for resp in opened:
        resp.close()
    return bare, loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20, help="page loads and events timed")
    parser.add_argument("--streams", type=int, default=50, help="pages open at idle")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    args = parse_with_quick(parser, sessions=500, rounds=5, streams=10, idle_seconds=2.0)
    count, rounds, streams, idle_s = args.sessions, args.rounds, args.streams, args.idle_seconds
    with tempfile.TemporaryDirectory(prefix="sd-bench-portal-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        catalog = Catalog.open(f"sqlite:///{home / 'swarmdeck.sqlite'}")
        started = time.perf_counter()
        ids = seed_many(catalog, count, Path(tmp))
        print(f"seeded {count:,} sessions in {time.perf_counter() - started:.1f} s")
        server = Server(home)
        try:
            cold, first, full, floor = page_loads(server, rounds)
            print(
                f"  sessions page: first byte {first:6.1f} ms, full load {full:6.1f} ms "
                f"(goal 200 / 1000 ms); static file floor {floor:.1f} ms "
                f"({full / floor:.1f}x the floor); the portal's first load, which reads "
                f"the whole store, {cold:.0f} ms"
            )
            latencies = event_latency(server, catalog, ids[-1], rounds)
            event = statistics.median(latencies)
            p95 = sorted(latencies)[max(0, int(len(latencies) * 0.95) - 1)]
            print(f"  event to open page: median {event:.0f} ms, p95 {p95:.0f} ms (goal 500 ms)")
            bare, loaded = idle_share(server, ids, streams, idle_s)
            print(
                f"  idle: {streams} open pages {loaded:.2f} % of a core, none open {bare:.2f} %"
                " (goal 5 %)"
            )
        finally:
            server.stop()
    print(f"portal: first page {first:.0f} ms, event {event:.0f} ms, idle {loaded:.1f} %")


if __name__ == "__main__":
    main()
