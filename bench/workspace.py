"""A session's workspace in the store: what capturing, snapshotting and restoring cost.

Generates a git repository of 10,000 files and 50 MiB (source-like text in 100
directories, one commit plus a few uncommitted files), then, through the real catalog
(SQLite in a temporary home, or --store URL):

- first submission: capture the repository into an empty store (every object travels);
- second submission: a new workspace on the same repository (only its commit travels);
- snapshot after a step that changed one file (median of --steps);
- restore on a new host: a fresh host cache fetches the packs and writes the files to a
  new directory (the part of a takeover the workspace adds);
- takeover (workspace_takeover.py): two `swarmdeck worker` processes with homes of their
  own; the one running a store session is SIGKILLed after a step that changed a file,
  and the other restores the files and asks the next turn: seconds from the kill to it
  (the 3 s lease included);

and, in the same run, the baselines: `git clone --no-local` of the repository and
`cp -r` of it. Goals (issue 36): snapshot <= 50 ms, first submission <= 2 s, takeover
<= 5 s.

    python bench/workspace.py [--quick] [--files N] [--mib M] [--store URL]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quick import parse_with_quick
from workspace_takeover import measure_takeover

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.workspace.snapshots import WorkspaceCache

WORDS = [
    "value",
    "request",
    "handler",
    "return",
    "self",
    "config",
    "session",
    "result",
    "error",
    "index",
    "item",
    "count",
    "total",
    "parse",
    "build",
    "write",
    "read",
    "token",
    "model",
    "store",
    "cache",
    "commit",
    "tree",
]


def make_repo(root: Path, files: int, mib: float, seed: int = 7) -> int:
    """A repository of `files` source-like files totalling about `mib` MiB; its bytes."""
    rng = random.Random(seed)
    root.mkdir()
    per_file = int(mib * 1024 * 1024 / files)
    dirs = max(1, files // 100)
    total = 0
    for n in range(files):
        folder = root / f"pkg{n % dirs:03d}"
        folder.mkdir(exist_ok=True)
        lines, size = [], 0
        while size < per_file:
            line = f"    {rng.choice(WORDS)}_{rng.randrange(10**6)} = " + " + ".join(
                rng.choice(WORDS) for _ in range(6)
            )
            lines.append(line)
            size += len(line) + 1
        text = f"def f{n}():\n" + "\n".join(lines) + "\n"
        (folder / f"mod{n:05d}.py").write_text(text)
        total += len(text)
    (root / ".gitignore").write_text("*.log\n")
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "generated"], cwd=root, check=True)
    (root / "notes.txt").write_text("uncommitted work\n")  # a submission takes it too
    (root / "run.log").write_text("ignored\n")
    return total


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (git) so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn, *args):  # type: ignore[no-untyped-def]
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def baselines(repo: Path, work: Path) -> tuple[float, float]:
    """Seconds for `git clone --no-local` and for `cp -r` of the repository."""
    clone, _ = timed(
        subprocess.run,
        ["git", "clone", "-q", "--no-local", str(repo), str(work / "clone")],
    )
    copy, _ = timed(subprocess.run, ["cp", "-r", str(repo), str(work / "copy")])
    return clone, copy


def run(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="sd-bench-ws-"))
    try:
        repo = work / "repo"
        size = make_repo(repo, args.files, args.mib)
        store = args.store or f"sqlite:///{work / 'store.sqlite'}"
        catalog = Catalog.open(store)
        host_a = WorkspaceCache(work / "host-a")
        print(
            f"repository: {args.files} files, {size / 2**20:.1f} MiB; store {store.split(':')[0]}"
        )

        first_s, first = timed(host_a.record, "ws-1", "submitted", repo, catalog)
        first_pack = catalog.pack_of(first)
        first_bytes = len(catalog.pack_data(first_pack[0]) or b"") if first_pack else 0
        print(f"first submission   {first_s * 1000:8.0f} ms  pack {first_bytes / 2**20:.1f} MiB")
        second_s, second = timed(host_a.capture, "ws-2", repo, catalog)
        print(f"second submission  {second_s * 1000:8.0f} ms  pack {second.pack_bytes} bytes")

        steps, cpu = [], []
        target = repo / "pkg000" / "mod00000.py"
        for k in range(args.steps):
            target.write_text(target.read_text() + f"    step_{k} = {k}\n")
            before = cpu_s()
            took, _ = timed(host_a.record, "ws-1", f"tool:{k}:call", repo, catalog)
            steps.append(took)
            cpu.append(cpu_s() - before)
        same, snap = timed(host_a.capture, "ws-1", repo, catalog)
        assert not snap.changed
        snapshot_ms = statistics.median(steps) * 1000
        print(
            f"snapshot, 1 file   {snapshot_ms:8.1f} ms  median of {args.steps} "
            f"(nothing changed: {same * 1000:.1f} ms)"
        )
        print(
            f"  its CPU (python + git) {statistics.median(cpu) * 1000:.1f} ms; load {os.getloadavg()[0]:.1f}"
        )

        latest = catalog.latest_ref("ws-1")
        assert latest is not None
        host_b = WorkspaceCache(work / "host-b")
        restore_s, _ = timed(host_b.export, latest, work / "restored", catalog)
        clone_s, copy_s = baselines(repo, work)
        print(f"restore, new host  {restore_s * 1000:8.0f} ms")
        print(
            f"git clone          {clone_s * 1000:8.0f} ms  (restore / clone {restore_s / clone_s:.2f}x)"
        )
        print(
            f"cp -r              {copy_s * 1000:8.0f} ms  (restore / cp {restore_s / copy_s:.2f}x)"
        )
        print(f"first submission / git clone: {first_s / clone_s:.2f}x")
        takeover_s = measure_takeover(repo, work)
        print(f"takeover           {takeover_s:8.2f} s  SIGKILL to the first resumed step")
        print("goals: snapshot <= 50 ms, first submission <= 2 s, takeover <= 5 s")
        print(f"workspace: snapshot {snapshot_ms:.1f} ms, takeover {takeover_s:.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000, help="files in the repository")
    parser.add_argument("--mib", type=float, default=50.0, help="its size in MiB")
    parser.add_argument("--steps", type=int, default=15, help="one-file snapshots to time")
    parser.add_argument("--store", help="a store URL (default: SQLite in a temporary dir)")
    args = parse_with_quick(parser, argv, files=500, mib=2.0, steps=5)
    os.environ.pop("SWARMDECK_STORE", None)
    run(args)


if __name__ == "__main__":
    main()
