"""`sessions ls` at 80 columns drops columns before it cuts a title, and never cuts its own
hint (issue 30, item 18: titles were cut to 12 characters and the hint mid-word)."""

from __future__ import annotations

import json
from pathlib import Path

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.cli.sessions import IDS_NOTE
from tests.conftest import run_cli
from tests.ui.seed import seed_fleet


def test_ls_at_80_columns_keeps_titles_and_its_hint_whole(sd_home: Path, tmp_path: Path) -> None:
    from swarmdeck.config import load_settings

    catalog = Catalog.open(load_settings().store_url)
    seeded = seed_fleet(catalog, tmp_path)
    long_title = "release notes for v2.0"
    catalog.create_session(
        session_id=seeded.coordinator + ".longtitle",
        model="fake:scripted",
        mode="agent",
        workdir=str(tmp_path),
        run_dir=str(tmp_path / "runs" / "longtitle"),
        task="Summarize.",
        title=long_title,
        parent_id=seeded.coordinator,
        root_id=seeded.coordinator,
        depth=1,
    )
    listed = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    titles = {s["title"] for s in listed}
    assert max(len(t) for t in titles) > 20, titles  # a title a narrow table would cut
    table = run_cli(sd_home, "sessions", "ls", COLUMNS="80")
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    for title in titles:
        assert any(line.rstrip().endswith(title) for line in lines), (title, table.stdout)
    assert IDS_NOTE in " ".join(table.stdout.split())
