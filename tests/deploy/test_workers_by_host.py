"""`swarmdeck workers` groups the fleet by host: each host's processes and the sessions they
hold, the queue depth and the takeovers of the last hour, in text that fits 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.config import LEASE_ENV
from tests.conftest import Store, run_cli
from tests.integration.test_sessions_support import open_catalog

# The rows below never beat: a long lease keeps them alive however slow the CLI starts.
LONG_LEASE = {LEASE_ENV: "600"}


def test_workers_groups_two_hosts_with_their_processes(store: Store, sd_home: Path) -> None:
    catalog = open_catalog()
    WorkerRegistry(catalog.engine, "host-a").register("exec-a1", role="worker")
    WorkerRegistry(catalog.engine, "host-a").register("exec-a2", role="worker")
    WorkerRegistry(catalog.engine, "host-b").register("exec-b1", role="worker")

    res = run_cli(sd_home, "workers", "--json", **LONG_LEASE)
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)
    by_host = {h["hostname"]: h for h in doc["hosts"]}
    assert sorted(by_host) == ["host-a", "host-b"]
    assert sorted(w["executor_id"] for w in by_host["host-a"]["workers"]) == [
        "exec-a1",
        "exec-a2",
    ]
    assert [w["executor_id"] for w in by_host["host-b"]["workers"]] == ["exec-b1"]
    assert by_host["host-a"]["sessions_running"] == 0
    assert (doc["queue_depth"], doc["takeovers_last_hour"]) == (0, [])

    text = run_cli(sd_home, "workers", **LONG_LEASE)
    assert text.code == 0, text.stderr
    lines = text.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert "host-a: 2 process(es), 0 session(s) held" in lines
    assert "host-b: 1 process(es), 0 session(s) held" in lines
    assert lines.index("host-a: 2 process(es), 0 session(s) held") < lines.index(
        "host-b: 1 process(es), 0 session(s) held"
    )
    assert "queue depth: 0 session(s) waiting to run" in lines
    assert "takeovers in the last hour: 0" in lines
