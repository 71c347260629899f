"""The sweeper's tools over random session trees, on both stores: old and new, live and
ended, system sessions, orphans, children in every state. scan_completed_sessions lists
exactly the trees that may go, cleanup_session removes exactly those (rows, artifact files,
engine history) and refuses every other session, and nothing else is touched."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS, SetWorkflowID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmdeck.catalog import schema
from swarmdeck.catalog.records import STATUSES, TERMINAL_STATUSES
from swarmdeck.runtime.engine import workflow_id
from swarmdeck.runtime.host import Host
from swarmdeck.runtime.mgmt_ops import RuntimeMgmtOps
from swarmdeck.tools.base import ToolContext
from swarmdeck.tools.builtins.mgmt import MGMT_TOOLS
from tests.conftest import Store
from tests.plugins.support import seed

TOOLS = {t.name: t for t in MGMT_TOOLS}
OLD, NEW = 3600.0, 30.0
LISTED = re.compile(r"^- (\S+) ", re.M)
_examples = itertools.count()


@DBOS.workflow(name="tests.sweeper.noop")
async def noop_run() -> int:
    """Stands for a session's workflow run: history the sweeper must delete with it."""
    return 1


@dataclasses.dataclass(frozen=True)
class Node:
    """One generated session."""

    parent: int | None  # an earlier node, or None (a root, or an orphan when `orphan`)
    status: str
    old: bool
    system: bool
    orphan: bool
    generations: int
    artifact: bool


def _node(i: int) -> st.SearchStrategy[Node]:
    parents = st.none() if i == 0 else st.one_of(st.none(), st.integers(0, i - 1))
    return st.builds(
        Node,
        parent=parents,
        status=st.sampled_from(STATUSES),
        old=st.booleans(),
        system=st.sampled_from([False, False, False, False, True]),
        orphan=st.sampled_from([False, False, True]),
        generations=st.integers(1, 3),
        artifact=st.booleans(),
    )


@st.composite
def forests(draw: st.DrawFn) -> list[Node]:
    size = draw(st.integers(1, 9))
    return [draw(_node(i)) for i in range(size)]


def expected_removals(nodes: list[Node], ids: list[str]) -> set[str]:
    """The oracle, written from the rules, not from the tool: a unit (a root, an orphan, or a
    child of a system session) goes with its subtree when no session in it is live, system
    or ended within the grace period."""
    kids: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        if n.parent is not None:
            kids.setdefault(n.parent, []).append(i)

    def subtree(i: int) -> list[int]:
        return [i, *(j for k in kids.get(i, []) for j in subtree(k))]

    def removable(i: int) -> bool:
        return all(
            nodes[j].status in TERMINAL_STATUSES and nodes[j].old and not nodes[j].system
            for j in subtree(i)
        )

    out: set[str] = set()
    for i, n in enumerate(nodes):
        unit = n.parent is None or nodes[n.parent].system
        if unit and removable(i):
            out |= {ids[j] for j in subtree(i)}
    return out


@pytest.fixture
def host(store: Store, sd_home: Path) -> Iterator[Host]:
    h = Host()
    h.launch()
    try:
        yield h
    finally:
        h.shutdown()


def _plant(host: Host, nodes: list[Node]) -> list[str]:
    """The generated sessions in the store, with engine runs and artifact files."""
    n = next(_examples)
    ids = [f"{'sys-' if node.system and i % 2 else ''}e{n}n{i}" for i, node in enumerate(nodes)]
    catalog, settings_ = host.catalog, host.settings
    for i, node in enumerate(nodes):
        sid = ids[i]
        parent = ids[node.parent] if node.parent is not None else None
        if node.parent is None and node.orphan:
            parent = f"e{n}gone{i}"
        root = ids[_root(nodes, i)] if node.parent is not None else (parent or sid)
        options = {"system_agent": sid} if node.system and not sid.startswith("sys-") else None
        seed(
            catalog,
            sid,
            status=node.status,
            ago=OLD if node.old else NEW,
            parent=parent,
            root=root,
            options=options,
        )
        with catalog.engine.begin() as conn:
            conn.execute(
                schema.sessions.update()
                .where(schema.sessions.c.id == sid)
                .values(generation=node.generations - 1)
            )
        for g in range(node.generations):
            with SetWorkflowID(workflow_id(sid, g)):
                DBOS.start_workflow(noop_run).get_result()
        if node.artifact:
            folder = settings_.artifacts_dir / sid
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "a.md").write_text(f"artifact of {sid}")
            catalog.put_artifact(sid, "a.md", str(folder / "a.md"), 10, "0" * 64)
        catalog.append_event(sid, "note", "user", {"text": "hello"})
    return ids


def _root(nodes: list[Node], i: int) -> int:
    while nodes[i].parent is not None:
        i = nodes[i].parent  # type: ignore[assignment]
    return i


def _ctx(host: Host, sweeper_id: str, key: str) -> ToolContext:
    assert host.engine is not None
    return ToolContext(
        session_id=sweeper_id,
        workdir=host.settings.home,
        mode="agent",
        run_dir=host.settings.runs_dir,
        services={
            "catalog": host.catalog,
            "settings": host.settings,
            "mgmt_ops": RuntimeMgmtOps(host.engine),
        },
        call_key=key,
        origin="cron",
    )


def _state(host: Host, ids: list[str]) -> dict[str, Any]:
    """What the store holds of these sessions: rows, events, artifacts, engine runs."""
    catalog = host.catalog
    with catalog.engine.connect() as conn:
        present = {
            r[0]
            for r in conn.execute(
                sa.select(schema.sessions.c.id).where(schema.sessions.c.id.in_(ids))
            )
        }
        events = dict(
            conn.execute(
                sa.select(schema.events.c.session_id, sa.func.count())
                .where(schema.events.c.session_id.in_(ids))
                .group_by(schema.events.c.session_id)
            ).all()
        )
    runs = {
        sid: sum(1 for g in range(4) if DBOS.get_workflow_status(workflow_id(sid, g)) is not None)
        for sid in ids
    }
    files = {sid: (host.settings.artifacts_dir / sid / "a.md").exists() for sid in ids}
    return {"present": present, "events": events, "runs": runs, "files": files}


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(nodes=forests())
def test_the_sweeper_removes_exactly_what_it_may(host: Host, nodes: list[Node]) -> None:
    ids = _plant(host, nodes)
    sweeper = f"sys-sweeper-of-{ids[0]}"
    seed(host.catalog, sweeper, status="idle", ago=0, options={"system_agent": "sweeper"})
    expected = expected_removals(nodes, ids)
    before = _state(host, ids)
    loop = asyncio.new_event_loop()
    try:
        scan = loop.run_until_complete(
            TOOLS["scan_completed_sessions"].call(_ctx(host, sweeper, "scan"), "{}")
        )
        listed = [i for i in LISTED.findall(scan.content) if i in ids]
        assert scan.quiet == (not expected and scan.quiet)
        for k, sid in enumerate(listed):
            out = loop.run_until_complete(
                TOOLS["cleanup_session"].call(
                    _ctx(host, sweeper, f"c{k}"), json.dumps({"session_id": sid})
                )
            )
            assert not out.is_error, out.content
        # Whatever the model asks, nothing else goes.
        for k, sid in enumerate(ids):
            out = loop.run_until_complete(
                TOOLS["cleanup_session"].call(
                    _ctx(host, sweeper, f"x{k}"), json.dumps({"session_id": sid})
                )
            )
            if sid not in expected:
                assert out.permission_denied, (sid, out.content)
    finally:
        loop.close()
    after = _state(host, ids)
    removed = set(ids) - after["present"]
    assert removed == expected
    assert {i for i in ids if host.catalog.find_session(i) is None} == expected
    for sid in ids:
        if sid in expected:
            assert (
                after["runs"][sid] == 0 and not after["files"][sid] and sid not in after["events"]
            )
        else:
            assert after["runs"][sid] == before["runs"][sid] == nodes[ids.index(sid)].generations
            assert after["files"][sid] == before["files"][sid]
            assert after["events"][sid] == before["events"][sid]
    audits = [e.payload for e in host.catalog.events(sweeper, kinds=["audit"])]
    assert {s for a in audits for s in a["sessions"] if s in ids} == expected
