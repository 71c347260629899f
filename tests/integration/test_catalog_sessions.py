"""The catalog contract for sessions, on both stores (SQLite file, PostgreSQL): a session
is created once (creating it again, as a step rerun does, keeps the stored one), its row
updates keep an ended session ended, lists come newest first with their filters, ids
resolve by prefix, and a tree is walked breadth first and deleted with all it stored.
"""

from __future__ import annotations

from typing import Any

import pytest

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.errors import NotFoundError
from swarmdeck.models.types import Usage
from tests.integration.test_catalog_support import (
    catalog_on_store,  # noqa: F401  (the `catalog` fixture)
    new_session,
)

# -- sessions -----------------------------------------------------------------------------


def test_create_get_and_create_again(catalog: Catalog) -> None:
    rec = catalog.create_session(
        session_id="s1",
        model="fake:scripted",
        mode="code",
        workdir="/w",
        run_dir="/r",
        task="do it ✓",
        title="t",
        tool_names=["read_file"],
        options={"max_turns": 3},
    )
    assert (rec.id, rec.root_id, rec.depth, rec.status) == ("s1", "s1", 0, "pending")
    assert rec.tool_names == ["read_file"] and rec.options == {"max_turns": 3}
    assert rec.task == "do it ✓" and rec.result is None and not rec.terminal
    # Creating the same id again (a step rerun) keeps the stored session untouched.
    again = catalog.create_session(
        session_id="s1", model="other", mode="agent", workdir="/x", run_dir="/y", task="other"
    )
    assert again == rec
    assert catalog.get_session("s1") == rec
    assert catalog.find_session("nope") is None
    with pytest.raises(NotFoundError):
        catalog.get_session("nope")


def test_create_many_at_once_and_again(catalog: Catalog) -> None:
    def spec(sid: str, task: str) -> dict[str, Any]:
        return {
            "session_id": sid,
            "model": "fake:scripted",
            "mode": "agent",
            "workdir": "/w",
            "run_dir": f"/r/{sid}",
            "task": task,
        }

    made = catalog.create_sessions([spec(f"b{i}", f"task {i}") for i in range(3)])
    assert [r.id for r in made] == ["b0", "b1", "b2"]
    assert [catalog.get_session(f"b{i}") for i in range(3)] == made
    assert [e.payload["text"] for e in catalog.events("b1")] == ["task 1"]
    # One id stored already: each is created on its own, the stored one left untouched.
    again = catalog.create_sessions([spec("b1", "other"), spec("b3", "task 3")])
    assert again[0] == made[1] and catalog.get_session("b3").task == "task 3"
    assert [e.payload["text"] for e in catalog.events("b1")] == ["task 1"]
    assert catalog.create_sessions([]) == []


def test_still_held_by_sees_live_sessions_not_yet_claimed_again(catalog: Catalog) -> None:
    for sid in ("h1", "h2"):
        new_session(catalog, sid)
        catalog.claim_run(sid, "dead-1")
    assert catalog.still_held_by(["dead-1"]) and catalog.still_held_by(["other", "dead-1"])
    assert not catalog.still_held_by(["other"])
    catalog.claim_run("h1", "live-2")  # taken over: its new execution began
    assert catalog.still_held_by(["dead-1"])
    catalog.set_status("h2", "completed")  # an ended session holds nothing
    assert not catalog.still_held_by(["dead-1"])


def test_update_session_round_trips(catalog: Catalog) -> None:
    new_session(catalog, "s1")
    new_session(catalog, "s2")
    before = catalog.get_session("s1")
    catalog.set_status("s1", "running")
    assert catalog.get_session("s1").status == "running"
    result = {"answer": 42, "notes": ["ü", None], "nested": {"ok": True}}
    catalog.update_session(
        "s1", status="completed", result=result, final_text="done", options={"a": 1}
    )
    after = catalog.get_session("s1")
    assert (after.status, after.result, after.final_text) == ("completed", result, "done")
    assert after.options == {"a": 1} and after.terminal
    assert after.updated_at >= before.updated_at and after.created_at == before.created_at
    catalog.set_status("s2", "failed", error="boom")
    s2 = catalog.get_session("s2")
    assert (s2.status, s2.error) == ("failed", "boom")
    # An ended session keeps its end: a late step of a cancelled workflow cannot revive it.
    catalog.set_status("s1", "running")
    assert catalog.get_session("s1").status == "completed"


def test_list_sessions_newest_first_with_filters(catalog: Catalog) -> None:
    new_session(catalog, "r1")
    new_session(catalog, "c1", parent="r1")
    new_session(catalog, "c2", parent="r1")
    new_session(catalog, "r2")
    for i, sid in enumerate(["r1", "c1", "c2", "r2"]):
        catalog.update_session(sid, created_at=1000.0 + i)
    catalog.set_status("c2", "completed")
    assert [s.id for s in catalog.list_sessions()] == ["r2", "c2", "c1", "r1"]
    assert [s.id for s in catalog.list_sessions(limit=2)] == ["r2", "c2"]
    assert [s.id for s in catalog.list_sessions(status="completed")] == ["c2"]
    assert [s.id for s in catalog.list_sessions(parent_id="r1")] == ["c2", "c1"]
    assert [s.id for s in catalog.list_sessions(root_id="r1")] == ["c2", "c1", "r1"]


def test_resolve_session_id_by_prefix(catalog: Catalog) -> None:
    new_session(catalog, "abc123")
    new_session(catalog, "abd456")
    assert catalog.resolve_session_id("abc123") == "abc123"
    assert catalog.resolve_session_id("abc") == "abc123"
    with pytest.raises(NotFoundError):
        catalog.resolve_session_id("ab")  # ambiguous
    with pytest.raises(NotFoundError):
        catalog.resolve_session_id("zz")


def test_descendants_and_delete_tree(catalog: Catalog) -> None:
    new_session(catalog, "root")
    for sid, parent in [("a", "root"), ("b", "root"), ("a1", "a"), ("a2", "a"), ("a1x", "a1")]:
        new_session(catalog, sid, parent=parent)
    new_session(catalog, "other")
    for sid in ["root", "a", "a1", "a1x", "b", "other"]:
        catalog.record_usage(sid, 0, "fake", "m", Usage(input=1, output=1), None)
        catalog.mark_tool_started(sid, "0:call")

    found = catalog.descendant_ids("root")
    assert sorted(found) == ["a", "a1", "a1x", "a2", "b"]
    depths = [catalog.get_session(s).depth for s in found]
    assert depths == sorted(depths), "not breadth first"
    assert catalog.get_session("a1x").root_id == "root"
    assert catalog.descendant_ids("b") == []

    removed = catalog.delete_session_tree("a")
    assert sorted(removed) == ["a", "a1", "a1x", "a2"]
    assert all(catalog.find_session(s) is None for s in removed)
    assert all(catalog.events(s) == [] for s in removed)
    assert catalog.usage_totals(removed).turns == 0
    assert catalog.mark_tool_started("a1", "0:call"), "tool marks of removed sessions remain"
    # The rest of the tree and the unrelated session keep everything.
    assert sorted(catalog.descendant_ids("root")) == ["b"]
    for sid in ["root", "b", "other"]:
        assert [e.key for e in catalog.events(sid)] == ["task"]
        assert not catalog.mark_tool_started(sid, "0:call")
    assert catalog.usage_totals(["root", "b", "other"]).turns == 3
