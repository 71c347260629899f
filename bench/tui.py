"""The terminal UI at fleet scale: start-up, scrolling and idle cost.

For 1,000 and 10,000 seeded sessions (trees of ten): the read model's first load, the
TUI's start-up (from the app's start to the fleet on screen, wall clock and CPU seconds),
the time to draw a screenful while paging through every session unfolded, and the cost
of a refresh that finds nothing new. Then the idle cost of the real `swarmdeck tui` in a
tmux terminal on the 1,000-session store: its CPU share over 30 s, read from
/proc/PID/stat (utime + stime). Without tmux, the idle figure is taken in this process
from /proc/self/stat, headless.

    python bench/tui.py [--idle-seconds 30] [--counts 1000,10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quick import parse_with_quick

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.ui.seed import seed_many

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.ui.app import DeckApp
from swarmdeck.views.fleet import FleetView

TICKS = os.sysconf("SC_CLK_TCK")
SIZE = (140, 40)


def cpu_seconds(pid: int | str = "self") -> float:
    """utime + stime of a process, in seconds (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def seeded(count: int, root: Path) -> Catalog:
    """A store of `count` sessions under `root`."""
    home = root / f"home-{count}"
    home.mkdir(parents=True, exist_ok=True)
    catalog = Catalog.open(f"sqlite:///{home / 'swarmdeck.sqlite'}")
    seed_many(catalog, count, root)
    return catalog


async def start_up_and_paging(catalog: Catalog) -> dict[str, float]:
    """The app's start-up, a screenful's draw while paging, and an empty refresh."""
    figures: dict[str, float] = {}
    view = FleetView(catalog, WorkerRegistry(catalog.engine))
    started = time.perf_counter()
    fleet = view.load()
    figures["read model load s"] = time.perf_counter() - started
    started = time.perf_counter()
    view.refresh(fleet)
    figures["refresh, nothing new, ms"] = (time.perf_counter() - started) * 1000
    wall, cpu = time.perf_counter(), time.process_time()
    app = DeckApp(catalog, WorkerRegistry(catalog.engine))
    async with app.run_test(size=SIZE) as pilot:
        while app.loaded_at is None:
            await pilot.pause(0.01)
        figures["start-up wall s"] = time.perf_counter() - wall
        figures["start-up CPU s"] = time.process_time() - cpu
        app.expanded = set(app.fleet.children)
        app.relayout()
        listed = app.session_list
        frames = []
        while listed.cursor < len(listed.lines) - 1 and len(frames) < 300:
            listed.action_page(1)
            began = time.perf_counter()
            for y in range(listed.size.height):
                listed.render_line(y)
            frames.append(time.perf_counter() - began)
        frames.sort()
        figures["screenful draw, median ms"] = frames[len(frames) // 2] * 1000
        figures["screenful draw, worst ms"] = frames[-1] * 1000
    return figures


def idle_in_tmux(home: Path, seconds: float) -> float:
    """The CPU share of `swarmdeck tui` left alone in a tmux terminal for `seconds`."""
    name = f"bench-tui-{os.getpid()}"
    env = f"SWARMDECK_HOME={home} TERM=xterm-256color"
    command = f"env {env} {sys.executable} -m swarmdeck tui"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", name, "-x", "140", "-y", "40", command], check=True
    )
    try:
        pid = None
        deadline = time.monotonic() + 30
        while pid is None and time.monotonic() < deadline:
            panes = subprocess.run(
                ["tmux", "list-panes", "-t", name, "-F", "#{pane_pid}"],
                capture_output=True,
                text=True,
            ).stdout.split()
            if panes and "sessions" in _screen(name):
                pid = _python_child(int(panes[0]))
            time.sleep(0.5)
        if pid is None:
            raise SystemExit(f"the TUI did not start in tmux:\n{_screen(name)}")
        time.sleep(3)  # past start-up
        before, began = cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)
        return (cpu_seconds(pid) - before) / (time.monotonic() - began)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], check=False)


def _screen(name: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", name], capture_output=True, text=True
    ).stdout


def _python_child(pid: int) -> int:
    """The pane's process, or its python child when the pane runs it under `env`."""
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    if comm.startswith("python"):
        return pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(children[0]) if children else pid


async def idle_headless(catalog: Catalog, seconds: float) -> float:
    """The CPU share of this process running the app headless and untouched."""
    app = DeckApp(catalog, WorkerRegistry(catalog.engine))
    async with app.run_test(size=SIZE) as pilot:
        while app.loaded_at is None:
            await pilot.pause(0.01)
        await pilot.pause(3)
        before, began = cpu_seconds(), time.monotonic()
        await pilot.pause(seconds)
        return (cpu_seconds() - before) / (time.monotonic() - began)


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--counts", default="1000,10000")
    args = parse_with_quick(parser, idle_seconds=1.0, counts="100")
    root = Path(tempfile.mkdtemp(prefix="swarmdeck-bench-tui-"))
    counts = [int(c) for c in args.counts.split(",")]
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} (figures under load)")
    catalogs = {}
    for count in counts:
        catalogs[count] = seeded(count, root)
        figures = asyncio.run(start_up_and_paging(catalogs[count]))
        print(f"\n{count:,} sessions")
        for name, value in figures.items():
            print(f"  {name:28} {value:8.3f}")
    idle_store = catalogs[min(counts)]
    home = Path(idle_store.engine.url.database).parent
    if shutil.which("tmux"):
        share = idle_in_tmux(home, args.idle_seconds)
        how = "swarmdeck tui in tmux, /proc/PID/stat"
    else:
        share = asyncio.run(idle_headless(idle_store, args.idle_seconds))
        how = "headless in this process, /proc/self/stat (no tmux)"
    print(f"\nidle for {args.idle_seconds:g} s with {min(counts):,} sessions ({how}):")
    print(f"  CPU share of one core        {share * 100:8.2f} %   (goal: under 2 %)")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
