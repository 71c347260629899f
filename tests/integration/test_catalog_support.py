"""Helpers of the catalog contract tests (test_catalog_sessions.py,
test_catalog_transcript.py, test_catalog_inbox_workers.py): a catalog on each store,
sessions made in one call, and threads or processes released together so that they really
contend, the way several workers share one store.

Holds no tests itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from swarmdeck.catalog.catalog import Catalog
from tests.conftest import Store

REPO = Path(__file__).resolve().parents[2]


# Named in the decorator, so the tests' `catalog` parameters do not shadow the name their
# module imports (ruff F811).
@pytest.fixture(name="catalog")
def catalog_on_store(store: Store) -> Iterator[Catalog]:
    """A catalog on a fresh store; its engine is closed after the test."""
    cat = Catalog.open(store.url)
    yield cat
    cat.engine.dispose()


def new_session(cat: Catalog, sid: str, parent: str | None = None, **fields: Any) -> None:
    """A session under `parent` (root, depth and workdir filled in)."""
    root, depth = sid, 0
    if parent is not None:
        up = cat.get_session(parent)
        root, depth = up.root_id, up.depth + 1
    cat.create_session(
        session_id=sid,
        model=fields.pop("model", "fake:scripted"),
        mode=fields.pop("mode", "agent"),
        workdir="/tmp/w",
        run_dir=f"/tmp/runs/{sid}",
        task=fields.pop("task", f"task of {sid}"),
        parent_id=parent,
        root_id=root,
        depth=depth,
        **fields,
    )


def race(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """Run fn(0..n-1) on n threads released together by a barrier; results in index order."""
    barrier = threading.Barrier(n)

    def go(i: int) -> Any:
        barrier.wait(timeout=30)
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(go, range(n)))


# -- helper processes ---------------------------------------------------------------------

# Each child opens the store, says "ready", waits for "go" on stdin, does its part and
# prints one JSON line. The parent releases them all at once so they really contend.
CHILD = textwrap.dedent(
    """
    import json, sys
    import sqlalchemy as sa
    from swarmdeck.catalog.catalog import Catalog
    from swarmdeck.catalog.workers import WorkerRegistry

    role, url, name, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if role != "open":
        cat = Catalog.open(url)
    print("ready", flush=True)
    sys.stdin.readline()
    if role == "open":
        cat = Catalog.open(url)
        out = sorted(sa.inspect(cat.engine).get_table_names())
    elif role == "append":
        out = [cat.append_event("s", f"{name}-{i}", "note", {"i": i}) for i in range(count)]
        out += [cat.append_event("s", f"shared-{i}", "note", {"by": name}) for i in range(count)]
    elif role == "claim":
        out = WorkerRegistry(cat.engine).claim_dead(name)
    print(json.dumps(out), flush=True)
    """
)


def run_children(role: str, url: str, names: list[str], count: int = 0) -> list[Any]:
    """Start one child per name, release them together, return their outputs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWARMDECK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, role, url, name, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in names
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line.strip() == "ready", p.stderr.read() if p.stderr else line
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            outputs.append(json.loads(out.strip().splitlines()[-1]))
        return outputs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
