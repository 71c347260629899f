"""A session waiting for a person's answer whose process has ended is waiting for input,
not orphaned: `sessions ls`, `sessions show` and the TUI's read model say the same
(issue 30 item 19: the demo's question showed as `orphaned` in `sessions ls`)."""

from __future__ import annotations

import json
from pathlib import Path

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.views.fleet import FleetView
from tests.conftest import Store, run_cli
from tests.ui.seed import DEAD_WORKER, seed_fleet


def test_a_question_nobody_holds_shows_as_needing_input_everywhere(
    store: Store, sd_home: Path, tmp_path: Path
) -> None:
    catalog = Catalog.open(store.url)
    s = seed_fleet(catalog, tmp_path)
    catalog.update_session(s.asker, executor=DEAD_WORKER)  # its process died
    registry = WorkerRegistry(catalog.engine)
    assert s.asker in registry.orphaned([catalog.get_session(s.asker)])  # nobody runs it
    listed = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    asker = next(r for r in listed if r["id"] == s.asker)
    assert asker["status"] == "input_required"
    orphans = json.loads(
        run_cli(sd_home, "sessions", "ls", "--json", "--status", "orphaned").stdout
    )
    assert s.asker not in [r["id"] for r in orphans] and s.orphan in [r["id"] for r in orphans]
    shown = json.loads(run_cli(sd_home, "sessions", "show", s.asker, "--json").stdout)
    assert shown["status"] == "input_required" and shown["question"] == s.question
    row = FleetView(catalog, registry).load().rows[s.asker]
    assert row.status == "input_required" and row.needs_me
