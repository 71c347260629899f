"""What the multi-host tests ask of the store, run on a namespaced host (the test's own
process cannot reach the lab's network): `python -m tests.multihost.probe COMMAND ARGS`.
Each command prints one JSON document."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.config import load_settings

WORKDIR = "/srv/sd/work/proj"
POLL_S = 0.1


def catalog() -> Catalog:
    """The lab's store (SWARMDECK_STORE)."""
    return Catalog.open(load_settings().store_url)


def submit(prefix: str, count: str) -> list[str]:
    """Hand `count` sessions to the fleet in one transaction, tasks `PREFIX i`.

    They keep a shared workspace: WORKDIR exists on every host, and the tests count the
    `once` effect in each host's own copy of it (the store workspace has tests of its own:
    the dispatches from the planner's repository)."""
    from swarmdeck.runtime.host import Host, SessionRequest

    host = Host()
    shared = {"workspace": "shared"}
    batch = [
        SessionRequest(f"{prefix} {i}", "fake", Path(WORKDIR), options=dict(shared))
        for i in range(int(count))
    ]
    return [r.id for r in host.create_sessions(batch, fleet=True)]


def sessions(ids: list[str]) -> dict[str, Any]:
    """Each session's status, epoch and the host of the executor that ran it last."""
    cat = catalog()
    with cat.engine.connect() as conn:
        w = schema.workers.c
        hosts = dict(conn.execute(sa.select(w.executor_id, w.hostname)).all())
    out = {}
    for sid in ids:
        rec = cat.get_session(sid)
        events = [(e.kind, e.payload) for e in cat.events(sid)]
        out[sid] = {
            "status": rec.status,
            "epoch": rec.epoch,
            "final_text": rec.final_text,
            "host": hosts.get(rec.executor or "", rec.executor),
            "events": [[kind, payload] for kind, payload in events],
            "tool_results": [p for kind, p in events if kind == "tool_result"],
        }
    return out


def wait(ids_json: str, until: str, timeout: str) -> dict[str, Any]:
    """Poll until every session is terminal (`until` = done) or has journaled a tool result
    (`until` = tool), then report them as `sessions` does."""
    ids = json.loads(ids_json)
    deadline = time.monotonic() + float(timeout)
    cat = catalog()
    while True:
        if until == "done":
            ready = all(cat.get_session(i).terminal for i in ids)
        else:
            ready = all(cat.events(i, kinds=["tool_result"]) for i in ids)
        if ready or time.monotonic() > deadline:
            return {"ready": ready, "sessions": sessions(ids)}
        time.sleep(POLL_S)


def main(argv: list[str]) -> None:
    """Run one command and print its JSON."""
    commands = {"submit": submit, "wait": wait, "sessions": lambda *a: sessions(list(a))}
    print(json.dumps(commands[argv[0]](*argv[1:])))


if __name__ == "__main__":
    main(sys.argv[1:])
