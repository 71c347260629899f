"""What a cancel from the TUI costs: Host.cancel_offline in the TUI's process (the catalog,
then DBOS's client), next to a `swarmdeck sessions cancel` process (what the TUI started
before: a Python start-up and the engine's launch). Sessions of the demo's scripted model
on a throwaway SQLite home, none started (the cost is the call's, not a workflow's).

    python bench/tui_cancel.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from quick import parse_with_quick


def main() -> None:
    """Print the median of each way to cancel, in seconds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parse_with_quick(parser, rounds=1)
    root = Path(tempfile.mkdtemp(prefix="sd-bench-cancel-"))
    home = root / "home"
    home.mkdir(mode=0o700)
    os.environ["SWARMDECK_HOME"] = str(home)
    from swarmdeck.runtime.host import Host, SessionRequest

    host = Host()

    def session() -> str:
        request = SessionRequest("Ask which branch", "demo:scripted", root, title="bench")
        return host.create_session(request).id

    in_process, by_process = [], []
    for _ in range(args.rounds):
        sid = session()
        began = time.monotonic()
        host.cancel_offline(sid)
        in_process.append(time.monotonic() - began)
        sid = session()
        began = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "swarmdeck", "sessions", "cancel", sid],
            check=True,
            capture_output=True,
        )
        by_process.append(time.monotonic() - began)
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} (figures under load)")
    print(f"cancel, median of {args.rounds} (s):")
    print(f"  Host.cancel_offline (the TUI now)      {statistics.median(in_process):8.3f}")
    print(f"  `swarmdeck sessions cancel` process    {statistics.median(by_process):8.3f}")


if __name__ == "__main__":
    main()
