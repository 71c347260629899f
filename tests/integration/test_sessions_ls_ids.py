"""`sessions ls` never cuts an id: it prints shortest unique prefixes (and says so), every
command takes them, and `--json` carries task, cost, tokens, worker and parent. The read
model under it follows the store by its event cursor."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.workers import WorkerRegistry
from swarmdeck.views.fleet import FleetView
from tests.conftest import Store, in_parallel, run_cli
from tests.ui.seed import DEAD_WORKER, seed_fleet


def test_ls_prints_whole_prefixes_that_every_command_takes(
    store: Store, sd_home: Path, tmp_path: Path
) -> None:
    seeded = seed_fleet(Catalog.open(store.url), tmp_path)
    listed = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    by_id = {s["id"]: s for s in listed}
    assert len(by_id) == 8
    coordinator = by_id[seeded.coordinator]
    assert coordinator["task"] == "Review the project with sub-agents."
    assert coordinator["turns"] == 1 and coordinator["tokens"] == {"input": 1200, "output": 80}
    assert abs(coordinator["cost_usd"] - 0.0021) < 1e-9
    assert coordinator["worker"] == "host-b-7-live00"
    assert by_id[seeded.reviewer]["parent_id"] == seeded.coordinator
    assert by_id[seeded.orphan]["status"] == "orphaned"
    assert by_id[seeded.orphan]["worker"] == DEAD_WORKER
    assert by_id[seeded.asker]["question"] == seeded.question
    assert by_id[seeded.system]["system"] is True
    prefixes = {s["prefix"]: s["id"] for s in listed}
    assert len(prefixes) == 8 and all(sid.startswith(p) for p, sid in prefixes.items())
    # A prefix is shorter than its id where the store allows it.
    assert len(by_id[seeded.asker]["prefix"]) < len(seeded.asker)
    for columns in ("80", "120"):
        table = run_cli(sd_home, "sessions", "ls", COLUMNS=columns)
        assert table.code == 0, table.stderr
        words = table.stdout.split()
        assert all(p in words for p in prefixes), (columns, table.stdout)
        assert "shortest unique prefixes" in " ".join(words)
        assert "…" not in "".join(line[:20] for line in table.stdout.splitlines())
    shows = in_parallel(
        {p: partial(run_cli, sd_home, "sessions", "show", p, "--json") for p in prefixes}
    )
    for prefix, res in shows.items():
        assert res.code == 0, res.stderr
        assert json.loads(res.stdout)["id"] == prefixes[prefix]
    tail = run_cli(sd_home, "sessions", "tail", by_id[seeded.reviewer]["prefix"], "--no-follow")
    assert tail.code == 0 and "div(a, b) does not check b." in tail.stderr


def test_the_fleet_view_reads_only_what_changed(store: Store, tmp_path: Path) -> None:
    catalog = Catalog.open(store.url)
    seeded = seed_fleet(catalog, tmp_path)
    view = FleetView(catalog, WorkerRegistry(catalog.engine))
    fleet = view.load()
    assert fleet.rows[seeded.orphan].status == "orphaned"
    assert fleet.rows[seeded.waiter].wake_at == fleet.rows[seeded.waiter].updated_at + 60
    assert [r.id for r in fleet.descendants(seeded.coordinator)] == [
        seeded.reviewer,
        seeded.tester,
    ]
    same, changed = view.refresh(fleet)
    assert changed == set() and same is fleet
    catalog.set_status(seeded.tester, "idle")
    catalog.append_event(seeded.asker, "x1", "user", {"text": "hello"})
    fleet, changed = view.refresh(fleet)
    assert changed == {seeded.tester, seeded.asker}
    assert fleet.rows[seeded.tester].status == "idle"
    # A new session whose id shares a longer head makes an older prefix longer.
    twin = seeded.asker[:-1] + "3"
    catalog.create_session(
        session_id=twin, model="m", mode="agent", workdir="/", run_dir="/", task="t"
    )
    fleet, changed = view.refresh(fleet)
    assert {twin, seeded.asker} <= changed
    assert fleet.rows[twin].prefix == twin and fleet.rows[seeded.asker].prefix == seeded.asker
    catalog.delete_session_tree(twin)
    fleet, changed = view.refresh(fleet)
    assert twin not in fleet.rows and len(fleet.rows) == 8
