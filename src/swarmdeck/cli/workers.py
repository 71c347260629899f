"""`swarmdeck workers`: the processes that serve the store, and the work waiting for them."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from swarmdeck.cli.app import app


def fleet_status() -> dict[str, Any]:
    """The live executors (fleet workers and local runs), their sessions, the queue."""
    from swarmdeck.cli.sessions import open_catalog, worker_registry
    from swarmdeck.views.fleet_status import fleet_status as read_fleet

    catalog = open_catalog()
    return read_fleet(catalog, worker_registry(catalog))


def print_fleet(console: Console, doc: dict[str, Any]) -> None:
    """The fleet as a table, then the queue and the supervisors."""
    fleet = [w for w in doc["workers"] if w["role"] == "worker"]
    if doc["workers"]:
        table = Table(box=None, header_style="bold")
        for col in ("host", "pid", "executor id", "role", "heartbeat", "sessions running"):
            table.add_column(col, justify="right" if col in ("pid", "sessions running") else "left")
        for w in doc["workers"]:
            table.add_row(
                w["hostname"],
                str(w["pid"]),
                w["executor_id"],
                w["role"],
                f"{w['heartbeat_age_s']:.1f} s ago",
                str(w["sessions_running"]),
            )
        console.print(table)
    print_queue(console, doc, has_fleet=bool(fleet))
    for s in doc["supervisors"]:
        console.print(
            f"supervisor {s['supervisor_id']} on {s['hostname']} keeps {s['processes']} "
            "worker process(es)"
        )


def print_queue(console: Console, doc: dict[str, Any], *, has_fleet: bool) -> None:
    """How to start a worker when none serves the store, then the hand-over queue."""
    if not has_fleet:
        console.print("no fleet worker serves this store: runs happen in their own process")
        console.print("start one with `swarmdeck worker` (or `swarmdeck worker --processes N`)")
    line = f"queue depth: {doc['queue_depth']} session(s) waiting to run"
    if doc["waiting_for_a_worker"]:
        line += f", {doc['waiting_for_a_worker']} not yet taken by a worker"
    console.print(line)


def fleet_by_host() -> dict[str, Any]:
    """The fleet grouped by host, with the queue and the takeovers of the last hour."""
    from swarmdeck.cli.sessions import open_catalog, worker_registry
    from swarmdeck.views.fleet_status import fleet_summary

    catalog = open_catalog()
    summary = fleet_summary(catalog, worker_registry(catalog))
    return {
        "hosts": [
            {
                "hostname": h.hostname,
                "sessions_running": h.sessions_running,
                "workers": h.workers,
            }
            for h in summary.hosts
        ],
        "workers": [w for h in summary.hosts for w in h.workers],
        "queue_depth": summary.queue_depth,
        "waiting_for_a_worker": summary.waiting_for_a_worker,
        "takeovers_last_hour": summary.takeovers_last_hour,
    }


def print_hosts(console: Console, doc: dict[str, Any]) -> None:
    """One block per host: its executors and the sessions each runs; then queue, takeovers."""
    for host in doc["hosts"]:
        console.print(
            f"[bold]{host['hostname']}[/bold]: {len(host['workers'])} process(es), "
            f"{host['sessions_running']} session(s) held"
        )
        for w in host["workers"]:
            console.print(
                f"  pid {w['pid']:<7} {w['role']:<6} {w['executor_id'][:24]:<24} "
                f"{w['heartbeat_age_s']:>6.1f} s ago  {w['sessions_running']:>3} session(s)"
            )
    print_queue(console, doc, has_fleet=any(w["role"] == "worker" for w in doc["workers"]))
    console.print(f"takeovers in the last hour: {len(doc['takeovers_last_hour'])}")


@app.command()
def workers(
    as_json: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
) -> None:
    """List the live workers of this store by host (processes, sessions held), the queue
    depth and the takeovers of the last hour."""
    doc = fleet_by_host()
    if as_json:
        print(json.dumps(doc))
        return
    print_hosts(Console(width=80), doc)
