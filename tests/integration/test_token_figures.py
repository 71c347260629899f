"""One session's token figures read the same on every surface: the demo's closing line,
`sessions ls`, `sessions show`, `usage` and the TUI's inspector (issue 30, item 16: the
demo said 3421 tokens, `sessions ls` 13,851 and `sessions show` "in 3034 out 387")."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console

from swarmdeck.cli.sessions import open_catalog, worker_registry
from swarmdeck.ui.inspector import inspector_body
from swarmdeck.views.detail import session_detail
from tests.conftest import run_cli


def _rendered(renderable: object) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    console.file.close()
    return " ".join(console.export_text().split())


def test_every_surface_shows_one_sessions_figures_alike(sd_home: Path) -> None:
    demo = run_cli(sd_home, "demo", timeout=120, COLUMNS="200")
    assert demo.code == 0, demo.stderr
    listed = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    root = next(s for s in listed if s["parent_id"] is None and s["title"] == "swarmdeck demo")
    tree = [s for s in listed if s["id"] == root["id"] or s["parent_id"] == root["id"]]
    stored = json.loads(run_cli(sd_home, "sessions", "show", root["id"], "--json").stdout)
    raw = stored["usage"]
    all_input = raw["input"] + raw["cache_read"] + raw["cache_write"]
    assert raw["cache_read"] > 0  # the scripted model reports a prompt cache's hits
    share = raw["cache_read"] / all_input
    line = (
        f"{all_input + raw['output']:,} tokens: input {all_input:,} "
        f"(cached {raw['cache_read']:,}, {share:.0%}) · output {raw['output']:,}"
    )
    assert line in " ".join(demo.stdout.split()), demo.stdout[-600:]
    shown = run_cli(sd_home, "sessions", "show", root["id"], COLUMNS="200")
    assert line in " ".join(shown.stdout.split()), shown.stdout[:600]
    catalog = open_catalog()
    detail = session_detail(catalog, worker_registry(catalog), root["id"])
    assert line in _rendered(inspector_body(detail, time.time()))
    ls = run_cli(sd_home, "sessions", "ls", COLUMNS="200").stdout
    [root_row] = [r for r in ls.splitlines() if r.split()[:1] == [root["prefix"]]]
    assert f" {all_input + raw['output']:,} " in root_row, root_row
    # `usage --session` sums the tree: the same figures, summed over the rows of `ls`.
    summed = json.loads(run_cli(sd_home, "usage", "--session", root["id"], "--json").stdout)
    tokens = summed["tokens"]
    tree_input = tokens["input"] + tokens["cache_read"] + tokens["cache_write"]
    assert tree_input == sum(s["tokens"]["input"] for s in tree)
    assert tokens["output"] == sum(s["tokens"]["output"] for s in tree)
    table = run_cli(sd_home, "usage", "--session", root["id"], COLUMNS="200").stdout
    total = next(r for r in table.splitlines() if r.strip().startswith("total")).split()
    cached = f"{tokens['cache_read']:,} ({tokens['cache_read'] / tree_input:.0%})"
    assert " ".join(total[2:6]) == f"{tree_input:,} {cached} {tokens['output']:,}", total
