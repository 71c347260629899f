"""The overhead of `swarmdeck dispatch` around the model, on both of its paths, against
pilot-workers measured in the same run.

A fake LLM server runs in this process at zero latency; each run is a real `dispatch`
process doing a two-turn explore task (read a file, submit the result). Measured in one
clock (time.monotonic of this process: the fake server stamps requests with it too):

  startup   from just before spawning the process to the first LLM request
  verdict   from the last LLM response to the verdict line arriving on stdout
  exit      from the verdict line to the process exit (shutdown; the planner already has
            its answer)

Two paths of ours: `in-process` (`dispatch --local`: the run starts the engine and the
provider SDK itself) and `fleet` (a warm `swarmdeck worker`, started by the bench and
given a few runs to warm up, takes the session; dispatch only hands it over and follows).
Medians over N runs. Goals on the fleet path: startup <= 300 ms, verdict <= 100 ms.
pilot-workers (PyPI) with its OpenCode engine (npm) is measured against the same fake
server when it can be installed here; otherwise the bench says why and skips it. Where the
fleet path's start goes is shown from `python -X importtime`. The last line is the fleet
path's `fleet path: startup X ms, verdict Y ms`; `--quick` skips pilot-workers and the
external runners' rows (bench/runner_overhead.py).

    python bench/dispatch.py [--runs N] [--no-peer] [--peer-cache DIR] [--store URL]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from child_env import child_env
from fake_server import write_bench_provider
from quick import parse_with_quick
from runner_overhead import bench_runners, report_runners, runner_reply

from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall

RESULT = {"facts": [{"fact": "main returns 42", "file_line": "app.py:2"}], "truncated": False}
PILOT_BLOCK = (
    "Done.\n<!--PILOT_RESULT_BEGIN-->\n"
    + json.dumps(
        {"facts": [{"fact": "main returns 42", "file_line": "app.py:2"}], "truncated": False}
    )
    + "\n<!--PILOT_RESULT_END-->"
)
KEY_PACKAGES = (
    "openai",
    "anthropic",
    "dbos",
    "sqlalchemy",
    "pydantic",
    "rich",
    "typer",
    "genai_prices",
    "psycopg",
    "yaml",
)
GOAL_STARTUP_MS = 300
GOAL_VERDICT_MS = 100


class Recorder:
    """The fake model's script: two turns per run, each reply's time recorded by run tag."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.replies: dict[str, list[float]] = defaultdict(list)

    @staticmethod
    def tag(request: FakeRequest) -> str:
        text = json.dumps(list(request.messages))
        start = text.find("BENCH-")
        return text[start : start + 12] if start >= 0 else "other"

    def __call__(self, request: FakeRequest) -> Reply:
        with self.lock:
            self.replies[self.tag(request)].append(time.monotonic())
        external = runner_reply(request, RESULT)
        if external is not None:
            return external
        if "PILOT" in request.task or "pilot" in json.dumps(request.body.get("messages", [])[:1]):
            return self.pilot_reply(request)
        if request.turn == 0:
            return Reply("Reading.", (ReplyToolCall("read_file", {"path": "app.py"}),))
        return Reply("Done.", (ReplyToolCall("submit_result", {"result": RESULT}),))

    @staticmethod
    def pilot_reply(request: FakeRequest) -> Reply:
        # OpenCode also asks for a session title; any short text serves.
        if not request.body.get("tools"):
            return Reply("bench run")
        if request.turn == 0:
            return Reply("Reading.", (ReplyToolCall("read", {"filePath": "app.py"}),))
        return Reply(PILOT_BLOCK)


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def timed_run(
    argv: list[str], env: dict[str, str], cwd: Path, verdict_marker: str | None
) -> dict[str, float]:
    """Spawn one dispatch; the times (monotonic) of spawn, verdict line and exit (with no
    marker, a bare runner's: its exit is its end)."""
    spawn = time.monotonic()
    proc = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    verdict_at = float("nan")
    lines = []
    assert proc.stdout is not None
    for raw in proc.stdout:
        lines.append(raw)
        if verdict_marker is not None and verdict_marker.encode() in raw:
            verdict_at = time.monotonic()
    proc.wait()
    if verdict_marker is None:
        verdict_at = time.monotonic()
    return {
        "spawn": spawn,
        "verdict": verdict_at,
        "exit": time.monotonic(),
        "code": proc.returncode,
        "lines": lines,
    }


def measure(
    name: str,
    runs: int,
    fake: FakeLLM,
    recorder: Recorder,
    make_argv: Any,
    env: dict[str, str],
    cwd: Path,
    verdict_marker: str | None,
) -> dict[str, Any]:
    """N runs; medians of startup, verdict and exit latency."""
    startup, verdict, exits, failures = [], [], [], 0
    for i in range(runs):
        tag = f"BENCH-{name[:1]}{i:05d}"
        before = len(fake.requests)
        t = timed_run(make_argv(tag), env, cwd, verdict_marker)
        mine = [r for r in fake.requests[before:] if tag in json.dumps(r.body)]
        replies = recorder.replies.get(tag, [])
        if not mine or not replies or t["verdict"] != t["verdict"]:
            failures += 1
            if failures == 1:
                sys.stderr.write(
                    f"{name}: run {i} failed (exit {t['code']}): {b''.join(t['lines'])[-300:]!r}\n"
                )
            continue
        startup.append(min(r.timestamp for r in mine) - t["spawn"])
        verdict.append(t["verdict"] - max(replies))
        exits.append(t["exit"] - t["verdict"])
    return {
        "name": name,
        "runs": runs,
        "ok": len(startup),
        "startup_ms": median_ms(startup),
        "verdict_ms": median_ms(verdict),
        "exit_ms": median_ms(exits),
    }


# --- ours ----------------------------------------------------------------------------------


WARMUP_RUNS = 3
WORKER_READY_S = 60.0


def bench_ours(
    runs: int, fake: FakeLLM, recorder: Recorder, root: Path, store: str | None
) -> list[dict[str, Any]]:
    """Our two paths: in-process (--local), then the fleet (a warm worker)."""
    home = root / "sd-home"
    write_bench_provider(home, fake.openai_base_url, model="fake", concurrency=None)
    workdir = root / "project"
    env = child_env()
    env["SWARMDECK_HOME"] = str(home)
    if store:
        env["SWARMDECK_STORE"] = store

    def argv(tag: str, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "swarmdeck", "dispatch", "--provider", "bench", "--mode", "explore",
            "--workdir", str(workdir), "--task", f"{tag}: what does main return?", "--quiet", *extra,
        ]  # fmt: skip

    marker = '"swarmdeck.verdict"'
    local = measure(
        "in-process", runs, fake, recorder, lambda t: argv(t, "--local"), env, workdir, marker
    )
    worker = start_worker(env, workdir)
    try:
        measure("warm-up", min(WARMUP_RUNS, runs), fake, recorder, argv, env, workdir, marker)
        fleet = measure("fleet", runs, fake, recorder, argv, env, workdir, marker)
        fleet["imports"] = import_breakdown(argv("BENCH-x00000"), env, workdir)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    return [local, fleet]


def start_worker(env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    """`swarmdeck worker`, once its lease is registered (its first line says it runs)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", "worker"],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline().decode(errors="replace")
    if not line.startswith("worker "):
        proc.kill()
        raise RuntimeError(f"the worker did not start: {line!r}")
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep its pipe drained
    return proc


def import_breakdown(argv: list[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
    """Where a dispatch process spends its start: the interpreter, then the modules it
    imports (top level, cumulative seconds, from `python -X importtime`)."""
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    found: dict[str, float] = {"(interpreter start)": time.monotonic() - t}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *argv[1:]],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2]
        seconds = int(parts[1]) / 1e6
        if name.startswith(" ") and not name.startswith("  "):  # imported at top level
            found[name.strip()] = seconds
        elif name.strip() in KEY_PACKAGES:  # a big dependency, wherever it was imported
            found[f"  of which {name.strip()}"] = seconds
    return found


# --- the peer: pilot-workers with its OpenCode engine -----------------------------------------


def ensure_peer(cache: Path) -> tuple[Path, str] | str:
    """A venv with pilot-workers and its pinned OpenCode installed; or why there is none."""
    venv = cache / "venv"
    pw9 = venv / "bin" / "pw9"
    try:
        if not pw9.exists():
            sys.stderr.write(f"bench: installing pilot-workers into {venv} ...\n")
            subprocess.run(
                [sys.executable, "-m", "venv", str(venv)],
                check=True,
                capture_output=True,
                timeout=120,
            )
            subprocess.run(
                [str(venv / "bin" / "pip"), "install", "-q", "pilot-workers[yaml]"],
                check=True, capture_output=True, timeout=300,
            )  # fmt: skip
        if shutil.which("npm") is None:
            return "npm is not installed, so OpenCode (pilot-workers' engine) cannot be installed"
        home = cache / "pilot-home"
        home.mkdir(parents=True, exist_ok=True)
        # Its install script runs `python3`: the venv's must come first on PATH.
        path = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        env = {**os.environ, "PILOT_WORKERS_HOME": str(home), "PATH": path}
        proc = subprocess.run(
            [str(pw9), "install", "runner", "opencode"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            return f"`pw9 install runner opencode` failed: {(proc.stderr or proc.stdout).strip()[-300:]}"
        version = subprocess.run(
            [str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('pilot-workers'))"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        return venv, version
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        return f"pilot-workers could not be installed: {exc} {detail.strip()[-300:]}"


PEER_SETUP = """
import sys
from pathlib import Path
from pilot_workers import providers
from pilot_workers.runners import get_runner
from pilot_workers.credentials import ensure_private_directories
import json
key = sys.argv[1]
providers.reload() if hasattr(providers, "reload") else None
p = providers.load_user_providers()[key] if hasattr(providers, "load_user_providers") else providers.PROVIDERS[key]
runner = get_runner(p.runner)
dest = runner.credential_path(p)
ensure_private_directories(dest)
dest.write_text(json.dumps(runner.credential_payload(p, "bench-key-not-secret")))
dest.chmod(0o600)
print(dest)
"""


def bench_peer(
    runs: int, fake: FakeLLM, recorder: Recorder, root: Path, cache: Path
) -> dict[str, Any] | str:
    found = ensure_peer(cache)
    if isinstance(found, str):
        return found
    venv, version = found
    home = root / "pilot-home"
    shutil.copytree(cache / "pilot-home", home, symlinks=True)
    (home / "providers").mkdir(exist_ok=True)
    (home / "providers" / "bench.yaml").write_text(
        "key: bench\nprovider_id: bench-worker\nmodel_id: fake\n"
        f"base_url: {fake.openai_base_url}\ndisplay_name: Bench\n"
        "context_tokens: 128000\noutput_tokens: 8192\n"
        "strengths: bench\nsuitable_modes: explore\n"
    )
    path = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PILOT_WORKERS_HOME": str(home), "PATH": path}
    py = str(venv / "bin" / "python")
    setup = subprocess.run([py, "-c", PEER_SETUP, "bench"], env=env, capture_output=True, text=True)
    if setup.returncode != 0:
        return f"pilot-workers provider setup failed: {setup.stderr.strip()[-300:]}"
    workdir = root / "project"

    def argv(tag: str) -> list[str]:
        task = root / f"{tag}.md"
        task.write_text(f"{tag} PILOT: what does main return? Answer with facts.\n")
        return [str(venv / "bin" / "pw9"), "dispatch", "--provider", "bench", "--mode", "explore",
                "--workdir", str(workdir), "--task-file", str(task)]  # fmt: skip

    result = measure(
        "pilot-workers", runs, fake, recorder, argv, env, workdir, '"worker_runner.verdict"'
    )
    result["version"] = version
    if result["ok"] == 0:
        return f"pilot-workers {version} ran but no run reached the fake model and a verdict (see above)"
    return result


# --- report --------------------------------------------------------------------------------------


def report(
    ours: list[dict[str, Any]], peer: dict[str, Any] | str, runners: list[dict[str, Any]] | str
) -> None:
    local, fleet = ours
    print(f"\ndispatch overhead, medians over {fleet['runs']} runs (fake LLM at zero latency)\n")
    rows = [local, fleet] if isinstance(peer, str) else [local, fleet, peer]
    print(f"{'':<16}{'startup ms':>12}{'verdict ms':>12}{'exit ms':>10}{'ok':>6}")
    for r in rows:
        print(
            f"{r['name']:<16}{r['startup_ms']:>12.0f}{r['verdict_ms']:>12.0f}{r['exit_ms']:>10.0f}{r['ok']:>6}"
        )
    met = {
        k: fleet[f"{k}_ms"] <= goal
        for k, goal in (("startup", GOAL_STARTUP_MS), ("verdict", GOAL_VERDICT_MS))
    }
    print(
        f"\ngoals on the fleet path: startup <= {GOAL_STARTUP_MS} ms: {'met' if met['startup'] else 'NOT met'}; "
        f"verdict <= {GOAL_VERDICT_MS} ms: {'met' if met['verdict'] else 'NOT met'}"
    )
    print("\nratios (below 1: the first is faster)")
    pairs = [("fleet / in-process", fleet, local)]
    if isinstance(peer, str):
        print(f"  (pilot-workers skipped: {peer})")
    else:
        pairs += [
            (f"fleet / pilot-workers {peer['version']}", fleet, peer),
            ("in-process / pilot-workers", local, peer),
        ]
    for label, a, b in pairs:
        cells = "  ".join(
            f"{key[:-3]} {a[key] / b[key]:.2f}" for key in ("startup_ms", "verdict_ms", "exit_ms")
        )
        print(f"  {label:<34} {cells}")
    print("\nwhere the fleet path's startup goes (one dispatch; top-level imports, cumulative s):")
    imports = fleet["imports"]
    top = sorted(
        ((k, v) for k, v in imports.items() if not k.startswith(" ")), key=lambda kv: -kv[1]
    )
    for name, seconds in top[:10]:
        print(f"  {name:<46} {seconds:6.3f}")
    print(f"  {'(all top-level imports)':<46} {sum(v for k, v in top if k[0] != '('):6.3f}")
    for name, seconds in sorted(
        ((k, v) for k, v in imports.items() if k.startswith(" ")), key=lambda kv: -kv[1]
    ):
        print(f"  {name:<46} {seconds:6.3f}")
    report_runners(runners)
    print(f"fleet path: startup {fleet['startup_ms']:.0f} ms, verdict {fleet['verdict_ms']:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--no-peer", action="store_true", help="skip pilot-workers")
    parser.add_argument("--no-runners", action="store_true", help="skip the runner rows")
    parser.add_argument("--store", default=None, help="postgresql://... (default: SQLite)")
    parser.add_argument(
        "--peer-cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "swarmdeck-bench",
        help="where pilot-workers and OpenCode are installed once",
    )
    args = parse_with_quick(parser, runs=1)
    recorder = Recorder()
    with tempfile.TemporaryDirectory(prefix="sd-bench-") as tmp, FakeLLM(recorder) as fake:
        root = Path(tmp)
        (root / "project").mkdir()
        (root / "project" / "app.py").write_text("def main():\n    return 42\n")
        ours = bench_ours(args.runs, fake, recorder, root, args.store)
        peer: dict[str, Any] | str = "skipped (--no-peer)"
        if args.quick:
            # Its install (PyPI, npm) and OpenCode's start-up cost half a minute or more.
            peer = "skipped (--quick: a run without it measures pilot-workers)"
        elif not args.no_peer:
            try:
                peer = bench_peer(args.runs, fake, recorder, root, args.peer_cache)
            except Exception as exc:  # the bench reports the peer's failure, never crashes on it
                peer = f"pilot-workers failed: {type(exc).__name__}: {exc}"
        runners: list[dict[str, Any]] | str = "skipped (--no-runners)"
        if args.quick:
            runners = "skipped (--quick: a run without it installs and measures the runners)"
        elif not args.no_runners:
            cache = args.peer_cache / "runners"
            runners = bench_runners(args.runs, fake, recorder, root, cache, measure, start_worker)
    report(ours, peer, runners)


if __name__ == "__main__":
    main()
