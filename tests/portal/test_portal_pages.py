"""The portal's pages over real HTTP: the session tree paged and filtered on a large
store, deep links by prefix, the fleet page's figures (tests/bench runs bench/portal.py)."""

from __future__ import annotations

import re
from pathlib import Path

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.views.fleet_status import midnight
from tests.conftest import Store
from tests.portal.portal_support import Client, running_portal
from tests.ui.seed import seed_fleet, seed_many

ROOT = Path(__file__).resolve().parents[2]


def _signed_in(portal_base: str, one_time: str) -> Client:
    client = Client(portal_base)
    assert client.get(f"/login?token={one_time}")[0] == 200
    return client


def test_the_tree_is_paged_and_filtered_on_a_large_store(
    store: Store, sd_home: Path, tmp_path: Path
) -> None:
    catalog = Catalog.open(store.url)
    ids = seed_many(catalog, 1000, tmp_path)
    with running_portal(sd_home) as portal:
        client = _signed_in(portal.base, portal.one_time)
        code, first = client.get("/sessions")
        assert code == 200
        assert "page 1 of 10" in first and "1,000" in first
        assert first.count("<tr class=") == 100
        code, last = client.get("/sessions?page=10")
        assert "page 10 of 10" in last and 'rel="next"' not in last and 'rel="prev"' in last
        shown = set(re.findall(r'data-id="([^"]+)"', first + last))
        assert len(shown) == 200
        # A status filter: seed_many makes every fourth session failed.
        code, failed = client.get("/sessions?status=failed")
        rows = re.findall(r'<tr class="(context|)".*?st-\w+">(\w+)</span>', failed, re.S)
        # 250 failed children (each tree of ten has some) under their 100 roots, which
        # are shown as context: every line either matches or places a match.
        assert "page 1 of 4 (350 lines)" in failed and len(rows) == 100
        assert all((st == "failed") != (cls == "context") for cls, st in rows), rows
        # A search finds one session and shows it under its root.
        code, found = client.get("/sessions?q=task+number+997")
        assert "session 997" in found and found.count("<tr class=") == 2
        code, none = client.get("/sessions?q=no-such-thing")
        assert "No session matches" in none
        # A deep link by prefix lands on the full id.
        code, page = client.get(f"/s/{ids[5]}")
        assert code == 200 and f'data-session="{ids[5]}"' in page
        asker = seed_fleet(catalog, tmp_path).asker
        code, page = client.get(f"/s/{asker[:11]}")
        assert code == 200 and f'data-session="{asker}"' in page
        code, missing = client.get("/s/ffffffffffff")
        assert code == 404 and "ffffffffffff" in missing


def test_the_fleet_page_shows_the_queue_and_todays_spend(sd_home: Path, tmp_path: Path) -> None:
    catalog = Catalog.open(f"sqlite:///{sd_home / 'swarmdeck.sqlite'}")
    seed_many(catalog, 20, tmp_path)
    seed_fleet(catalog, tmp_path)
    with running_portal(sd_home) as portal:
        client = _signed_in(portal.base, portal.one_time)
        code, page = client.get("/")
        assert code == 200
        assert 'id="queue-depth">0<' in page
        today = catalog.usage_totals(since=midnight()).by_model["fake:scripted"]
        all_input = today["input"] + today["cache_read"] + today["cache_write"]
        assert today["turns"] >= 20  # seed_many's one turn a session, and seed_fleet's
        assert f'<td>fake:scripted</td><td class="n">{today["turns"]}</td>' in page
        assert f">{all_input:,}<" in page and f">{today['output']:,}<" in page
        assert "need you" in page
