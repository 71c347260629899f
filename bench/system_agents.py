"""The packaged mgmt plugin for 1,000 sweeper iterations, with a scripted model.

A real `swarmdeck worker` runs the three system agents (their crons made fast by a plugin
that overrides them). The sweeper's cron check wakes its model only when there is work:
every 100 iterations the bench seeds a stale session tree for it to remove, and when old
engine runs pile up it prunes them (its own rolled-over generations among them). At
iteration 10 and 1,000 the worker is measured (RSS), the store's rows are counted, and the
worker is killed with SIGKILL: the time until a fresh worker has the sweeper ticking again
is the recovery time. Printed: those figures, their ratios, and the model calls made.

    python bench/system_agents.py [--iterations 1000] [--store postgresql://...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
import yaml
from proc_stats import rss_mib
from quick import parse_with_quick

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.testing.fake_llm import FakeLLM
from swarmdeck.testing.script import FakeRequest, Reply, ReplyToolCall

ROOT = Path(__file__).resolve().parents[1]
PACKAGED = ROOT / "src/swarmdeck/plugins/packaged/mgmt/agents"
LISTED = re.compile(r"^- (\S+) ", re.M)
SEED_EVERY = 100
ROW_TABLES = ("sd_events", "sd_inbox", "sd_generations", "operation_outputs", "workflow_status")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--store", default=None, help="postgresql://... (default: a fresh SQLite file)")
    return parse_with_quick(p, iterations=100)


class Model:
    """The scripted model of the three system agents: it answers what its tick shows."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __call__(self, req: FakeRequest) -> Reply:
        name = next(
            (
                n
                for k, n in (
                    ("stand by", "operator"),
                    ("something to clean", "sweeper"),
                    ("needs attention", "resourcemgr"),
                )
                if k in req.task
            ),
            "other",
        )
        self.calls[name] = self.calls.get(name, 0) + 1
        if name != "sweeper" or req.turn == 0 or req.messages[-1].get("role") == "tool":
            return Reply(text="ok")
        said = str(next(m["content"] for m in reversed(req.messages) if m["role"] == "user"))
        todo = [
            ReplyToolCall("cleanup_session", {"session_id": i, "reason": "stale"})
            for i in LISTED.findall(said.split("may be removed", 1)[-1])
            if "may be removed" in said
        ]
        if "call prune_orchestrations" in said:
            todo.append(
                ReplyToolCall(
                    "prune_orchestrations", {"older_than_minutes": 0, "keep_executions": 1}
                )
            )
        return Reply(tool_calls=tuple(todo)) if todo else Reply(text="nothing")


def fast_plugin(folder: Path) -> Path:
    """The packaged sweeper and resource manager with fast crons."""
    for name, seconds in (("sweeper", "0.02"), ("resourcemgr", "0.5")):
        text = (PACKAGED / f"{name}.agent.md").read_text()
        text = re.sub(r"(cron:\n  seconds: )\d+", rf"\g<1>{seconds}", text)
        text = text.replace("grace_minutes: 5", "grace_minutes: 0")
        path = folder / "agents" / f"{name}.agent.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmdeck", *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )


def worker(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        text=True,
    )


def ticks(catalog: Catalog) -> int:
    """Sweeper iterations: quiet ticks, and ticks that woke its model."""
    record = catalog.find_session("sys-sweeper")
    if record is None:
        return 0
    quiet = (record.options.get("cron") or {}).get("quiet_ticks", 0)
    return quiet + len(catalog.events("sys-sweeper", kinds=["timer"]))


def rows(catalog: Catalog) -> dict[str, int]:
    out = {}
    with catalog.engine.connect() as conn:
        names = set(sa.inspect(conn).get_table_names())
        prefix = "" if catalog.is_sqlite else "dbos."
        for table in ROW_TABLES:
            qualified = table if table.startswith("sd_") or catalog.is_sqlite else f"dbos.{table}"
            if table.startswith("sd_") and table not in names:
                continue
            out[table] = conn.exec_driver_sql(f"SELECT COUNT(*) FROM {qualified}").scalar_one()
        del prefix
    return out


def seed_stale(catalog: Catalog, n: int) -> None:
    """A stale tree: a root and a child that ended an hour ago."""
    for sid, parent in ((f"stale{n}", None), (f"stale{n}.kid", f"stale{n}")):
        catalog.create_session(
            session_id=sid,
            model="fake",
            mode="agent",
            workdir="/tmp",
            run_dir="/tmp",
            task="seeded",
            parent_id=parent,
            root_id=f"stale{n}",
        )
        with catalog.engine.begin() as conn:
            conn.execute(
                schema.sessions.update()
                .where(schema.sessions.c.id == sid)
                .values(status="completed", updated_at=time.time() - 3600)
            )


def run_until(catalog: Catalog, target: int, seeded: list[int], timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while (t := ticks(catalog)) < target:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the sweeper stalled at {t} iterations")
        if t // SEED_EVERY > len(seeded):
            seeded.append(t)
            seed_stale(catalog, len(seeded))
        time.sleep(0.05)


def recover(
    catalog: Catalog, proc: subprocess.Popen[str], env: dict[str, str]
) -> tuple[subprocess.Popen[str], float]:
    """SIGKILL the worker; start another; seconds until the sweeper ticks again."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = ticks(catalog)
    started = time.monotonic()
    fresh = worker(env)
    while ticks(catalog) <= before + 1:
        if time.monotonic() - started > 120:
            raise RuntimeError("no takeover after 120 s")
        time.sleep(0.01)
    return fresh, time.monotonic() - started


def main() -> None:
    args = parse_args()
    home = Path(tempfile.mkdtemp(prefix="sd-bench-mgmt-"))
    model = Model()
    with FakeLLM() as fake:
        fake.set_script(model)
        (home / "providers").mkdir()
        (home / "providers/fake.yaml").write_text(
            yaml.safe_dump(
                {
                    "key": "fake",
                    "kind": "openai",
                    "base_url": fake.openai_base_url,
                    "model": "scripted",
                    "needs_key": False,
                }
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMDECK_")}
        env.update(SWARMDECK_HOME=str(home), SWARMDECK_CLEANUP_GRACE_MINUTES="0")
        if args.store:
            env["SWARMDECK_STORE"] = args.store
        store = args.store or f"sqlite:///{home / 'swarmdeck.sqlite'}"
        cli(env, "system", "start", "--model", "fake", "--plugin", str(fast_plugin(home / "fast")))
        catalog = Catalog.open(store)
        seeded: list[int] = []
        proc = worker(env)
        t0 = time.monotonic()
        figures = {}
        marks = sorted({10, *(args.iterations * k // 4 for k in (1, 2, 3, 4))})
        for mark in marks:
            run_until(catalog, mark, seeded)
            sample = {"rss_mib": rss_mib(proc.pid), "rows": rows(catalog), "ticks": ticks(catalog)}
            if mark in (10, args.iterations):
                # Killed at the first and the last mark: the recovery time is measured there.
                proc, sample["recovery_s"] = recover(catalog, proc, env)
            figures[mark] = sample
            if len(fake.requests) > 500:
                fake.reset_stats()
        total = time.monotonic() - t0
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    first, last = figures[10], figures[args.iterations]
    second = figures[marks[1]]
    removed = sum(1 for n in range(1, len(seeded) + 1) if catalog.find_session(f"stale{n}") is None)
    print(f"{args.iterations} sweeper iterations in {total:.1f} s on {store.split('@')[-1]}")
    print(
        json.dumps(
            {"model_calls": model.calls, "stale_trees_seeded": len(seeded), "removed": removed},
            sort_keys=True,
        )
    )
    for mark, f in figures.items():
        recovery = f"recovery {f['recovery_s']:.2f} s, " if "recovery_s" in f else ""
        print(f"iteration {mark:>5}: RSS {f['rss_mib']:.1f} MiB, {recovery}rows {f['rows']}")
    print(
        f"ratios {args.iterations}/10: RSS {last['rss_mib'] / first['rss_mib']:.2f} "
        f"(the second worker, {args.iterations}/{marks[1]}: "
        f"{last['rss_mib'] / second['rss_mib']:.2f}), "
        f"recovery {last['recovery_s'] / first['recovery_s']:.2f}, "
        f"engine steps {last['rows']['operation_outputs'] / max(1, first['rows']['operation_outputs']):.2f}"
    )


if __name__ == "__main__":
    main()
