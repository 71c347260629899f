"""The KEDA ScaledObject of the Helm chart scales workers on the SQL in the chart's
values.yaml: run against a real catalog on PostgreSQL, it returns Catalog.queue_depth."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml

from swarmdeck.runtime.host import Host, SessionRequest
from tests.conftest import Store, write_provider
from tests.integration.test_sessions_support import open_catalog

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "swarmdeck"


def keda_query() -> str:
    """The query the chart hands KEDA's postgresql scaler."""
    return yaml.safe_load((CHART / "values.yaml").read_text())["keda"]["query"]


def scaler_reads(url: str) -> int:
    """What KEDA's scaler sees: the query's single integer."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(keda_query())).scalar_one())
    finally:
        engine.dispose()


def test_the_keda_query_counts_the_hand_over_queue(
    store: Store, sd_home: Path, workdir: Path, fake_llm
) -> None:
    if not store.is_postgres:
        pytest.skip("KEDA's scaler reads PostgreSQL only")
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    catalog = open_catalog()
    assert scaler_reads(store.url) == catalog.queue_depth()[0] == 0
    host = Host()
    for i in range(3):
        host.create_session(SessionRequest(f"job {i}", "fake", workdir), fleet=True)
    host.create_sessions(
        [SessionRequest(f"batch {i}", "fake", workdir) for i in range(2)], fleet=True
    )
    depth, untaken = catalog.queue_depth()
    assert (depth, untaken) == (5, 5)
    assert scaler_reads(store.url) == depth
