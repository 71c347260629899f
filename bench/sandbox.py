"""What confining a tool costs: one `true` through run_command under bubblewrap and Landlock,
each in a sandbox of its own (one-shot) and in the session's kept executor, against a bare
subprocess in the same run (issue 35 item 4: at most 5 ms per command over it); and what
the redactor costs on a 10 KB text with its encoded forms of each key.

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
from swarmdeck.tools.jail import executors
from swarmdeck.tools.sandbox import SandboxInfo, detect_sandbox, run_command

GOAL_MS = 5.0
# (sandbox, kept executor): the rows, in the order they print.
CONFIGS = [("bwrap", False), ("bwrap", True), ("landlock", False), ("landlock", True)]


def _ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def _true(kind: str, kept: bool, workdir: Path, run_dir: Path) -> float:
    start = time.perf_counter()
    result = await run_command(
        ["true"], workdir=workdir, run_dir=run_dir, writable=False, network=False,
        timeout_s=30, sandbox=SandboxInfo(kind, "bench"), kept=kept,  # type: ignore[arg-type]
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    if result.exit_code != 0:
        raise SystemExit(f"`true` failed under {kind}: {result.output}")
    return elapsed


def _bare() -> float:
    start = time.perf_counter()
    subprocess.run(["true"], check=True)
    return time.perf_counter() - start


async def _measure(kinds: list[str], runs: int) -> tuple[list[float], dict, dict]:
    """Interleaved, so a busy moment of the machine weighs on every row alike: the bare
    samples, each config's samples, and what starting each kind's executor took."""
    # One run dir per sandbox: a session runs in one sandbox.
    workdir, run_dirs = Path(tempfile.mkdtemp()), {k: Path(tempfile.mkdtemp()) for k in kinds}
    configs = [(kind, kept) for kind, kept in CONFIGS if kind in kinds]
    starts = {}
    for kind in kinds:  # the first command of a session starts its executor: apart
        starts[kind] = await _true(kind, True, workdir, run_dirs[kind])
    bare: list[float] = []
    samples: dict[tuple[str, bool], list[float]] = {config: [] for config in configs}
    for _ in range(runs):
        bare.append(_bare())
        for kind, kept in configs:
            samples[kind, kept].append(await _true(kind, kept, workdir, run_dirs[kind]))
    if executors.started() != len(kinds):
        raise SystemExit(f"{executors.started()} executors started for {len(kinds)} sandboxes")
    executors.stop_all()
    return bare, samples, starts


def _report(bare: list[float], samples: dict, starts: dict) -> None:
    print(f"bare subprocess            median {_ms(bare):6.1f} ms")
    verdicts = []
    for (kind, kept), found in samples.items():
        over = _ms(found) - _ms(bare)
        label = "kept executor" if kept else "one-shot"
        print(f"{kind:<9} {label:<16} median {_ms(found):6.1f} ms  (+{over:.1f} ms over bare)")
        if kept:
            verdicts.append(f"{kind} {'met' if over <= GOAL_MS else 'NOT met'} (+{over:.1f} ms)")
    started = ", ".join(f"{kind} {ms * 1000:.0f} ms" for kind, ms in starts.items())
    print(f"executor start, once per session and layout: {started}")
    print(f"goal <= {GOAL_MS:g} ms per command over bare: {', '.join(verdicts) or 'no sandbox'}")


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
    best = detect_sandbox().kind
    kinds = [k for k in ("bwrap", "landlock") if k == "landlock" or best == "bwrap"]
    if best == "none":
        kinds = []
    _report(*asyncio.run(_measure(kinds, args.runs)))
    plain, full = _redaction(args.keys)
    print(
        f"redact 10 KB: {plain * 1e6:.0f} us with no key, {full * 1e6:.0f} us with {args.keys} "
        f"keys and their encoded forms ({full / plain:.1f}x)"
    )


if __name__ == "__main__":
    main()
