"""A long session against a small window: 500 cron iterations, each reading a 2 KB file,
on the fake server with an 8,000-token window, in both wire formats.

Printed per format: the input tokens per turn (goal: flat after the first compaction),
the total input against the same session without compaction (what each turn would have
sent had the whole transcript gone out: computed from the stored transcript, since that
session could not run in this window), the share of input tokens the prompt cache served
(goal: at least 80 %), and the largest prompt against the window. Then the runtime's own
tokens per turn for each mode. It ends with two lines, the worse figure of the two
formats each: `cached share: X%` and `max prompt / window: Y%`.

    python bench/long_session.py [--iterations 500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from quick import parse_with_quick

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from tests.integration.context_support import (  # noqa: E402
    TASK,
    CronReader,
    data_file_text,
    window_of,
)

from swarmdeck.models.estimate import encoding_for  # noqa: E402
from swarmdeck.testing.fake_llm import FakeLLM  # noqa: E402

WINDOW = 8000
OUTPUT = 1000
MODES = ("agent", "code", "explore", "test", "review")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=500)
    return parse_with_quick(p, iterations=20)


def provider_file(home: Path, url: str, kind: str) -> None:
    providers = home / "providers"
    providers.mkdir(parents=True, exist_ok=True)
    doc = {
        "key": "fake",
        "kind": kind,
        "base_url": url,
        "model": "scripted",
        "needs_key": False,
        "context_tokens": WINDOW,
        "output_tokens": OUTPUT,
    }
    (providers / "fake.yaml").write_text(yaml.safe_dump(doc))


async def run_session(kind: str, iterations: int, fake: FakeLLM, workdir: Path) -> dict[str, Any]:
    """One long session to its end; what the store and the server saw."""
    from swarmdeck.runtime.context import Meter
    from swarmdeck.runtime.host import Host, SessionRequest
    from swarmdeck.runtime.journal import Journal
    from swarmdeck.testing.tool_search import searching

    url = fake.anthropic_base_url if kind == "anthropic" else fake.openai_base_url
    provider_file(Path(os.environ["SWARMDECK_HOME"]), url, kind)
    model = CronReader(iterations)
    # On Anthropic, cron is deferred to the vendor's tool search: found before it is called.
    fake.set_script(searching(model))
    fake.reset_stats()
    host = Host()
    options = {"max_turns": 4 * iterations, "rollover_iterations": 100}
    record = host.create_session(SessionRequest(TASK, "fake", workdir, options=options))
    started = time.monotonic()
    host.launch()
    try:
        await host.start(record.id)
        while not host.catalog.get_session(record.id).terminal:
            await asyncio.sleep(0.2)
    finally:
        await host.aclose()  # on the loop: shutdown() here leaves the model pools open
    elapsed = time.monotonic() - started
    catalog = host.catalog
    status = catalog.get_session(record.id).status
    turns = catalog.events(record.id, kinds=["assistant"])
    per_turn = [
        e.payload["usage"]["input"]
        + e.payload["usage"]["cache_read"]
        + e.payload["usage"]["cache_write"]
        for e in turns
    ]
    cached = sum(e.payload["usage"]["cache_read"] for e in turns)
    compactions = catalog.events(record.id, kinds=["compaction"])
    first = min((c.id for c in compactions), default=None)
    after = [n for e, n in zip(turns, per_turn, strict=True) if first is not None and e.id > first]
    # Without compaction, turn t sends the runtime's part and every message before it.
    journal = Journal(record.id)
    journal.take(catalog.events(record.id))
    meter = Meter(None)
    assert turns, (status, catalog.get_session(record.id).error)
    runtime = turns[0].payload["context"]["runtime"]
    fixed = runtime["system"] + runtime["tools"]
    positions = {key: i for i, (key, _, _) in enumerate(journal.sources)}
    sizes = [meter.raw(m) for m in journal.messages]
    uncompacted = 0
    for e in turns:
        before = positions.get(e.key, len(sizes))
        uncompacted += fixed + sum(sizes[:before])
    sent = [r.body for r in fake.requests if r.body]
    return {
        "status": status,
        "seconds": elapsed,
        "ticks": model.ticks,
        "turns": len(turns),
        "per_turn": per_turn,
        "after": after,
        "total": sum(per_turn),
        "uncompacted": uncompacted,
        "cached_share": cached / sum(per_turn) if per_turn else 0.0,
        "max_prompt": max(window_of(b, kind) for b in sent) / WINDOW,
        "compactions": len(compactions),
        "summaries": model.summaries,
        "task_seen": model.task_seen_at_end,
    }


def runtime_per_mode(workdir: Path) -> dict[str, dict[str, int]]:
    """The runtime's own tokens per turn in each mode (system prompt, skill index, tool
    schemas), by the estimate and by o200k_base (tiktoken)."""
    from swarmdeck.runtime import turn
    from swarmdeck.runtime.context import Meter, runtime_tokens
    from swarmdeck.runtime.host import Host, SessionRequest
    from swarmdeck.runtime.services import set_services

    host = Host()
    set_services(host.services)
    o200k = encoding_for("openai", "gpt-5")
    out = {}
    for mode in MODES:
        record = host.create_session(SessionRequest(TASK, "fake", workdir, mode=mode))
        prep = turn._prompt(record.id, 0, [])
        for label, meter in (("estimate", Meter(None)), ("o200k", Meter(o200k))):
            counts = runtime_tokens(meter, prep["system"], prep["specs"], prep["skills_index"])
            out[f"{mode} ({label})"] = counts
    host.shutdown()
    return out


def show(kind: str, r: dict[str, Any]) -> None:
    series = r["per_turn"]
    marks = ", ".join(str(series[i]) for i in range(0, len(series), max(1, len(series) // 10)))
    flat = r["after"]
    print(
        f"\n[{kind}] {r['status']}: {r['ticks']} iterations, {r['turns']} turns in "
        f"{r['seconds']:.1f} s; {r['compactions']} compactions ({r['summaries']} summaries "
        f"asked); task seen at the last iteration: {r['task_seen']}"
    )
    print(f"  input tokens per turn (every {max(1, len(series) // 10)}th): {marks}")
    if flat:
        print(
            f"  after the first compaction: min {min(flat)}, median "
            f"{statistics.median(flat):.0f}, max {max(flat)} (goal: flat)"
        )
    ratio = r["uncompacted"] / r["total"] if r["total"] else 0.0
    print(
        f"  total input {r['total']:,} tokens against {r['uncompacted']:,} without "
        f"compaction ({ratio:.1f}x more)"
    )
    print(f"  cached share of input: {r['cached_share']:.1%} (goal: >= 80%)")
    print(f"  largest prompt + output room / window: {r['max_prompt']:.1%}")


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="sd-bench-long-") as tmp:
        os.environ["SWARMDECK_HOME"] = str(Path(tmp) / "home")
        workdir = Path(tmp) / "project"
        workdir.mkdir()
        (workdir / "data.txt").write_text(data_file_text())
        results = {}
        with FakeLLM(context_tokens=WINDOW) as fake:
            for kind in ("anthropic", "openai"):
                results[kind] = asyncio.run(run_session(kind, args.iterations, fake, workdir))
                show(kind, results[kind])
            print("\nruntime's own tokens per turn, by mode:")
            for label, counts in runtime_per_mode(workdir).items():
                total = counts["system"] + counts["tools"]
                print(
                    f"  {label:<22} {total:>5}: system prompt {counts['system']} (skill index "
                    f"{counts['skills']}), tool schemas {counts['tools']}"
                )
    print(f"cached share: {min(r['cached_share'] for r in results.values()) * 100:.1f}%")
    print(f"max prompt / window: {max(r['max_prompt'] for r in results.values()) * 100:.1f}%")


if __name__ == "__main__":
    main()
