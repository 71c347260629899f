"""What confining a tool costs: one `true` through run_command under bubblewrap, Landlock
(the launcher) and none (the launcher alone), against a bare subprocess; and what the
redactor costs on a 10 KB text with its encoded forms of each key.

    python bench/sandbox.py [--runs 30] [--keys 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from quick import parse_with_quick

from swarmdeck.secrets.redact import Redactor
from swarmdeck.tools.sandbox import SandboxInfo, detect_sandbox, run_command


def _ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1000:6.1f} ms"


async def _run_true(kind: str, workdir: Path, run_dir: Path, runs: int) -> list[float]:
    info = SandboxInfo(kind, "bench")  # type: ignore[arg-type]
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await run_command(
            ["true"], workdir=workdir, run_dir=run_dir, writable=False, network=False,
            timeout_s=30, sandbox=info,
        )  # fmt: skip
        samples.append(time.perf_counter() - start)
    return samples


def _bare(runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(["true"], check=True)
        samples.append(time.perf_counter() - start)
    return samples


def _redaction(keys: int) -> tuple[float, float]:
    secrets = [f"sk-bench{i}-" + "Qw9x" * 9 for i in range(keys)]
    text = ("lorem ipsum dolor sit amet, consectetur adipiscing elit; " * 200)[:10_000]
    plain, full = Redactor(), Redactor(secrets)
    out = []
    for redactor in (plain, full):
        start = time.perf_counter()
        for _ in range(2_000):
            redactor.redact(text)
        out.append((time.perf_counter() - start) / 2_000)
    return out[0], out[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--keys", type=int, default=5)
    args = parse_with_quick(parser, runs=3, keys=2)
    os.environ.setdefault("SWARMDECK_HOME", tempfile.mkdtemp())
    workdir, run_dir = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    bare = _bare(args.runs)
    print(f"bare subprocess      {_ms(bare)}")
    best = detect_sandbox().kind
    for kind in ("bwrap", "landlock", "none"):
        if kind == "bwrap" and best != "bwrap":
            continue
        samples = asyncio.run(_run_true(kind, workdir, run_dir, args.runs))
        ratio = statistics.median(samples) / statistics.median(bare)
        print(f"run_command {kind:<9}{_ms(samples)}  ({ratio:.1f}x a bare subprocess)")
    plain, full = _redaction(args.keys)
    print(
        f"redact 10 KB: {plain * 1e6:.0f} us with no key, {full * 1e6:.0f} us with {args.keys} "
        f"keys and their encoded forms ({full / plain:.1f}x)"
    )


if __name__ == "__main__":
    main()
