"""The rows of bench/dispatch.py for the external runners: swarmdeck's overhead on top of
each runner itself, measured in the same run against the same fake server.

For each runner (installed once, at its pinned version, into the bench's cache): the bare
runner, started directly with a config that points it at the fake server, and
`swarmdeck dispatch --local --runner NAME` (the key proxy, the per-run home, the sandbox,
the event parsing, the verdict). One turn each, answered with the result block.

  startup   spawn to the first LLM request
  end       last LLM response to the end: the bare runner's exit, our verdict line

`added` is ours minus the bare runner's. Goal: <= 100 ms added at each end.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from swarmdeck.runners import install
from swarmdeck.runners.adapters import ADAPTERS
from swarmdeck.runners.base import Access, Endpoint
from swarmdeck.runners.result_block import render_block
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply
from swarmdeck.tools.sandbox import build_env

MARKER = "RUNNERBENCH"
GOAL_ADDED_MS = 100
# Each runner's wire and a model name it accepts.
WIRES = {
    "opencode": ("openai", "fake"),
    "claude": ("anthropic", "claude-sonnet-4-5"),
    "codex": ("openai", "gpt-5-codex"),
}


def runner_reply(request: FakeRequest, result: dict[str, Any]) -> Reply | None:
    """The fake's answer to a runner's request in this bench, or None (not one of ours)."""
    # Anywhere in the request: Codex sends its own developer and context messages first.
    if MARKER not in json.dumps(request.body):
        return None
    if not request.body.get("tools"):
        return Reply("bench run")  # a session title, or another side request
    return Reply("Done.\n" + render_block(result))


def _install(cache: Path, name: str) -> Path | str:
    state = install.status(cache, name)
    if state.binary is None:
        sys.stderr.write(f"bench: installing runner {name} into {cache} ...\n")
        try:
            state = install.install(cache, name)
        except Exception as exc:  # the bench reports a runner it cannot install, never crashes
            return f"{name} could not be installed: {exc}"
    assert state.binary is not None
    return state.binary


def bench_runners(
    runs: int,
    fake: FakeLLM,
    recorder: Any,
    root: Path,
    cache: Path,
    measure: Any,
    start_worker: Any,
) -> list[dict[str, Any]] | str:
    """Bare runner and `dispatch --runner` rows for each runner, in this process
    (`--local`) and on a warm worker (the fleet path); or why there are none."""
    rows: list[dict[str, Any]] = []
    skipped = []
    workdir = root / "project"
    for name in ADAPTERS:
        binary = _install(cache, name)
        if isinstance(binary, str):
            skipped.append(binary)
            continue
        wire, model = WIRES[name]
        base = fake.openai_base_url if wire == "openai" else fake.anthropic_base_url
        bare_argv = _bare(name, binary, root / f"bare-{name}", Endpoint(base, "none", model))
        env = {"PATH": "/usr/bin:/bin"}
        bare = measure(f"{name} bare", runs, fake, recorder, bare_argv, env, workdir, None)
        ours_argv, ours_env = _ours(name, root, cache, base, wire, model, workdir)
        verdict = '"swarmdeck.verdict"'
        local = measure(
            f"{name} --local", runs, fake, recorder, lambda t, argv=ours_argv: argv(t, "--local"),
            ours_env, workdir, verdict,
        )  # fmt: skip
        worker = start_worker(ours_env, workdir)
        try:
            measure(f"{name} warm-up", 1, fake, recorder, ours_argv, ours_env, workdir, verdict)
            fleet = measure(
                f"{name} fleet", runs, fake, recorder, ours_argv, ours_env, workdir, verdict
            )
        finally:
            worker.terminate()
            worker.wait(timeout=30)
        rows.append({"runner": name, "bare": bare, "local": local, "fleet": fleet})
    return rows or "; ".join(skipped)


def _bare(name: str, binary: Path, root: Path, endpoint: Endpoint) -> Any:
    """The bare runner's command line, each run in a fresh home of its own as ours gets
    (a runner's first start in a home sets up its state: that is the runner's cost)."""
    adapter = ADAPTERS[name]
    access = Access("explore", False)

    def argv(tag: str) -> list[str]:
        run_dir = root / tag
        env = build_env(run_dir)
        adapter.prepare(run_dir / "home", endpoint, access)
        prompt = f"{MARKER} {tag}: what does main return?"
        places = [f"{k}={v}" for k, v in env.items()]
        return ["/usr/bin/env", *places, *adapter.argv(binary, prompt, None, access)]

    return argv


def _ours(
    name: str, root: Path, cache: Path, base: str, wire: str, model: str, workdir: Path
) -> tuple[Any, dict[str, str]]:
    from child_env import child_env

    home = root / f"sd-home-{name}"
    home.mkdir(mode=0o700)
    (home / "providers").mkdir()
    (home / "runners").mkdir()
    (home / "runners" / name).symlink_to(install.runner_dir(cache, name))
    provider = {"key": "rb", "kind": wire, "base_url": base, "model": model, "needs_key": False}
    (home / "providers" / "rb.yaml").write_text(yaml.safe_dump(provider))
    env = child_env()
    env["SWARMDECK_HOME"] = str(home)

    def argv(tag: str, *extra: str) -> list[str]:
        return [
            sys.executable, "-m", "swarmdeck", "dispatch", "--provider", "rb", "--mode",
            "explore", "--workdir", str(workdir), "--runner", name, "--quiet",
            "--task", f"{MARKER} {tag}: what does main return?", *extra,
        ]  # fmt: skip

    return argv, env


def report_runners(rows: list[dict[str, Any]] | str) -> None:
    """The runner rows and the goal, against the bare runner."""
    print("\nexternal runners: swarmdeck's overhead on the runner itself (medians)\n")
    if isinstance(rows, str):
        print(f"  (skipped: {rows})")
        return
    print(f"{'':<20}{'startup ms':>12}{'end ms':>10}{'ok':>6}")
    for row in rows:
        for part in ("bare", "local", "fleet"):
            r = row[part]
            print(f"{r['name']:<20}{r['startup_ms']:>12.0f}{r['verdict_ms']:>10.0f}{r['ok']:>6}")
    print("\nadded by swarmdeck on the fleet path (a warm worker), goal <= 100 ms at each end:")
    for row in rows:
        bare, ours = row["bare"], row["fleet"]
        start = ours["startup_ms"] - bare["startup_ms"]
        end = ours["verdict_ms"] - bare["verdict_ms"]
        met = "met" if max(start, end) <= GOAL_ADDED_MS else "NOT met"
        local = row["local"]["startup_ms"] - bare["startup_ms"]
        print(
            f"  {row['runner']}: {start:.0f} ms at the start, {end:.0f} ms at the end: {met} "
            f"(--local: {local:.0f} ms at the start)"
        )
