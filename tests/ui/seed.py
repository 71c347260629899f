"""A fleet written straight into a catalog, with fixed ids and times, for the read model's
and the TUI's tests (and bench/tui.py): a coordinator with sub-agents, a session waiting
for an answer, one on a timer, a failed one, an orphaned one and a system agent."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.models.types import Usage

# Every seeded time is this far before the clock the test pins (see `NOW`).
NOW = 1_700_000_000.0
DEAD_WORKER = "host-a-4242-dead00"
# Shown in the inspector: the same in every run.
WORKDIR = "/srv/release"
REPORT = "# Review\n\ndiv(a, b) does not check b.\nAdd a test for div(1, 0).\n"


@dataclass(frozen=True)
class Seeded:
    """The ids the seeded fleet has."""

    coordinator: str = "18f00000001aa0001"
    reviewer: str = "18f00000001aa0001.c0ffee0001"
    tester: str = "18f00000001aa0001.c0ffee0002"
    asker: str = "18f00000002bb0002"
    waiter: str = "18f00000003cc0003"
    failed: str = "18f00000004dd0004"
    orphan: str = "18f00000005ee0005"
    system: str = "sys-sweeper"
    question: str = "Which branch should I release from?"


def _session(
    catalog: Catalog,
    sid: str,
    task: str,
    status: str,
    *,
    created: float,
    title: str | None = None,
    parent: str | None = None,
    executor: str | None = None,
    options: dict[str, object] | None = None,
    tmp: Path,
) -> None:
    catalog.create_session(
        session_id=sid,
        model="fake:scripted",
        mode="agent",
        workdir=WORKDIR,
        run_dir=str(tmp / "runs" / sid),
        task=task,
        title=title,
        parent_id=parent,
        root_id=parent.split(".")[0] if parent else None,
        depth=1 if parent else 0,
        executor=executor,
        options=options,
    )
    set_times(catalog, sid, status, created)


def set_times(catalog: Catalog, sid: str, status: str, created: float) -> None:
    """Pin a session's status and times (and its events' times) to the seeded clock."""
    with catalog.engine.begin() as conn:
        conn.execute(
            schema.sessions.update()
            .where(schema.sessions.c.id == sid)
            .values(status=status, created_at=created, updated_at=created + 5)
        )
        conn.execute(
            schema.events.update().where(schema.events.c.session_id == sid).values(ts=created)
        )


def _turn(catalog: Catalog, sid: str, n: int, text: str, calls: list[dict[str, object]]) -> None:
    tool_calls = [
        {"id": f"c{n}{i}", "name": c["name"], "arguments": json.dumps(c["args"])}
        for i, c in enumerate(calls)
    ]
    catalog.append_event(
        sid, f"turn:{n}", "assistant", {"text": text, "tool_calls": tool_calls, "usage": {}}
    )
    catalog.record_usage(sid, n, "fake", "scripted", Usage(input=1200, output=80), 0.0021)


def seed_fleet(catalog: Catalog, tmp: Path) -> Seeded:
    """Write the fleet; returns its ids."""
    s = Seeded()
    t = NOW - 3600
    _session(
        catalog,
        s.coordinator,
        "Review the project with sub-agents.",
        "running",
        created=t,
        title="release review",
        executor="host-b-7-live00",
        tmp=tmp,
    )
    _turn(
        catalog,
        s.coordinator,
        1,
        "Splitting the review.",
        [
            {"name": "spawn_agent", "args": {"task": "review calc.py", "title": "calc"}},
            {"name": "spawn_agent", "args": {"task": "review the tests", "title": "tests"}},
        ],
    )
    catalog.append_event(
        s.coordinator,
        "r1",
        "tool_result",
        {"call_id": "c10", "name": "spawn_agent", "content": "started sub-agent"},
    )
    catalog.append_event(
        s.coordinator, "n1", "notice", {"text": "fake: 429 rate limited; retrying in 2 s"}
    )
    catalog.append_event(
        s.coordinator,
        "u1",
        "child_update",
        {"text": f"sub-agent {s.reviewer} (calc) ended: completed"},
    )
    set_times(catalog, s.coordinator, "running", t)
    _session(
        catalog,
        s.reviewer,
        "review calc.py",
        "completed",
        created=t + 10,
        title="calc",
        parent=s.coordinator,
        tmp=tmp,
    )
    _turn(catalog, s.reviewer, 1, "div(a, b) does not check b.", [])
    report = tmp / "review-report.md"
    report.write_text(REPORT)
    catalog.put_artifact(s.coordinator, "review-report.md", str(report), len(REPORT), "0" * 64)
    catalog.update_session(
        s.reviewer, result={"summary": "div is unchecked"}, final_text="div(a, b) does not check b."
    )
    set_times(catalog, s.reviewer, "completed", t + 10)
    _session(
        catalog,
        s.tester,
        "review the tests",
        "running",
        created=t + 11,
        title="tests",
        parent=s.coordinator,
        tmp=tmp,
    )
    _session(
        catalog,
        s.asker,
        "Prepare the release notes.",
        "input_required",
        created=t + 600,
        title="release notes",
        tmp=tmp,
    )
    _turn(
        catalog,
        s.asker,
        1,
        "I need to know one thing.",
        [{"name": "ask_user", "args": {"question": s.question}}],
    )
    set_times(catalog, s.asker, "input_required", t + 600)
    _session(
        catalog,
        s.waiter,
        "Poll the build every minute.",
        "waiting",
        created=NOW - 20,
        title="build watch",
        tmp=tmp,
    )
    _turn(
        catalog,
        s.waiter,
        1,
        "Waiting for the build.",
        [{"name": "wait", "args": {"seconds": 60, "reason": "build"}}],
    )
    set_times(catalog, s.waiter, "waiting", NOW - 20)
    _session(
        catalog, s.failed, "Deploy to staging.", "failed", created=t + 900, title="deploy", tmp=tmp
    )
    _session(
        catalog,
        s.orphan,
        "Index the docs.",
        "running",
        created=t + 1200,
        title="docs index",
        executor=DEAD_WORKER,
        tmp=tmp,
    )
    _session(
        catalog,
        s.system,
        "Sweep finished sessions.",
        "idle",
        created=t - 600,
        title="sweeper",
        options={"system_agent": True},
        tmp=tmp,
    )
    with catalog.engine.begin() as conn:
        # A worker that died: its lease lapsed long ago, on another host.
        conn.execute(
            schema.workers.insert().values(
                executor_id=DEAD_WORKER,
                hostname="host-a",
                pid=4242,
                pid_start=None,
                started_at=t,
                heartbeat_at=t,
                stopped=False,
                role="worker",
            )
        )
    return s


def seed_many(catalog: Catalog, count: int, tmp: Path, *, now: float | None = None) -> list[str]:
    """`count` sessions in trees of ten (a root and nine children), in bulk inserts."""
    now = now or time.time()
    rows = []
    for n in range(count):
        root = n - n % 10
        rid = f"{int(now * 1000) - count + root:011x}{root:06x}"
        sid = rid if n == root else f"{rid}.{n:010x}"
        rows.append(
            {
                "id": sid,
                "parent_id": None if n == root else rid,
                "root_id": rid,
                "depth": 0 if n == root else 1,
                "agent": None,
                "model": "fake:scripted",
                "mode": "agent",
                "workdir": str(tmp),
                "run_dir": str(tmp / sid),
                "status": ("completed", "running", "idle", "failed")[n % 4],
                "title": f"session {n}",
                "task": f"task number {n}",
                "system_message": None,
                "tool_names": None,
                "options": "{}",
                "result": None,
                "final_text": None,
                "error": None,
                "generation": 0,
                "created_at": now - count + n,
                "updated_at": now - count + n,
                "executor": None,
                "epoch": 0,
                "active_at": None,
            }
        )
    with catalog.engine.begin() as conn:
        for start in range(0, count, 1000):
            conn.execute(schema.sessions.insert(), rows[start : start + 1000])
        conn.execute(
            schema.usage.insert(),
            [
                {
                    "session_id": r["id"],
                    "turn": 1,
                    "provider": "fake",
                    "model": "scripted",
                    "input": 100,
                    "output": 10,
                    "reasoning": 0,
                    "cache_read": 0,
                    "cache_write": 0,
                    "cost_usd": 0.001,
                    "ts": now,
                    "estimated": False,
                }
                for r in rows
            ],
        )
    _ = sa  # the statements above are SQLAlchemy Core
    return [r["id"] for r in rows]
