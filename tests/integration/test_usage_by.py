"""`swarmdeck usage --by tree|agent|model|day` on both stores: the same spend grouped four
ways, a tree against its budget, and cached reads priced as the vendor prices them."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import genai_prices

from tests.conftest import Store, run_cli, write_provider
from tests.integration.test_budget_warnings import SCRIPT
from tests.plugins.support import agent_file

CACHED = {"text": "ok", "usage": {"input": 1000, "cache_read": 9000, "output": 100}}


def _usage(home: Path, *args: str) -> dict[str, Any]:
    res = run_cli(home, "usage", "--json", *args)
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)


def test_usage_by_tree_agent_model_and_day(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    write_provider(sd_home, "openai", fake_llm.openai_base_url, model="gpt-4o")
    fake_llm.set_script(
        {"scenarios": [{"match": "CACHED", "turns": [CACHED]}, *SCRIPT["scenarios"]]}
    )
    tree = run_cli(sd_home, "run", "TREE job", "-m", "fake", "-C", str(workdir),
                   "--max-tokens", "10000", timeout=120)  # fmt: skip
    assert tree.code == 3, tree.stderr
    agent_file(workdir / ".swarmdeck", "pricer", "description: prices a cached turn")
    priced = run_cli(sd_home, "run", "CACHED turn", "--agent", "pricer", "-m", "openai",
                     "-C", str(workdir))  # fmt: skip
    assert priced.code == 0, priced.stderr
    rows = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    root = next(r["id"] for r in rows if r["title"].startswith("TREE"))
    mine = next(r["id"] for r in rows if r["agent"] == "pricer")

    by = {g: _usage(sd_home, "--by", g) for g in ("tree", "agent", "model", "day")}
    total = by["model"]["turns"]
    for doc in by.values():
        assert sum(row["turns"] for row in doc["groups"].values()) == total
    trees = by["tree"]["groups"]
    assert set(trees) == {root, mine} and trees[mine]["turns"] == 1
    spent = trees[root]["budget"]["max_tokens"]
    assert spent["limit"] == 10000 and spent["spent"] >= 10000 and trees[mine]["budget"] == {}
    assert set(by["agent"]["groups"]) == {"(no agent)", "pricer"}
    assert set(by["model"]["groups"]) == {"fake:scripted", "openai:gpt-4o"}
    assert set(by["day"]["groups"]) == {dt.date.today().isoformat()}

    # The cached turn costs what genai-prices says of its cached and uncached tokens.
    row = by["model"]["groups"]["openai:gpt-4o"]
    assert row["cache_read"] > 0
    usage = genai_prices.Usage(
        input_tokens=row["input"] + row["cache_read"], cache_read_tokens=row["cache_read"],
        output_tokens=row["output"],
    )  # fmt: skip
    price = float(genai_prices.calc_price(usage, "gpt-4o", provider_id="openai").total_price)
    assert abs(row["cost_usd"] - price) < 1e-9
    flat = genai_prices.Usage(input_tokens=row["input"] + row["cache_read"], output_tokens=100)
    assert price < float(genai_prices.calc_price(flat, "gpt-4o", provider_id="openai").total_price)

    table = run_cli(sd_home, "usage", "--by", "tree", COLUMNS="80").stdout
    [line] = [ln for ln in table.splitlines() if root.startswith(ln.split()[0])]
    assert re.search(r"1\d\d% of 10k tok$", line), table
    assert max(len(ln) for ln in table.splitlines()) <= 80
    bad = run_cli(sd_home, "usage", "--by", "week")
    assert bad.code == 2 and "use --by tree, agent, model, day" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
