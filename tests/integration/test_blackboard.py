"""The blackboard on both stores: compare-and-set, history, tombstones, idempotent writes,
scopes, redaction; its tools as a session calls them; `swarmdeck memory` bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.config import load_settings
from swarmdeck.errors import UsageError
from swarmdeck.memory.blackboard import MAX_VALUE_BYTES, Blackboard, Scope
from swarmdeck.memory.scopes import scope_for
from swarmdeck.tools.base import ToolContext
from swarmdeck.tools.builtins.memory import MEMORY_TOOLS
from tests.conftest import Store, run_cli
from tests.swarm.support import bare_session

SCOPE = Scope("swarm", "head")
TOOLS = {t.name: t for t in MEMORY_TOOLS}


def _catalog() -> Catalog:
    return Catalog.open(load_settings().store_url, lambda s: s.replace("hunter2", "[redacted]"))


def test_compare_and_set_history_and_tombstones(store: Store, sd_home: Path) -> None:
    catalog = _catalog()
    board = Blackboard(catalog.engine, catalog.redact)
    first = board.set(SCOPE, "plan", {"step": 1}, writer="a", expected_version=0)
    assert (first.landed, first.version) == (True, 1)
    taken = board.set(SCOPE, "plan", {"step": "mine"}, writer="b", expected_version=0)
    assert (taken.landed, taken.version) == (False, 1)
    assert taken.current is not None and taken.current.value == {"step": 1}
    assert board.set(SCOPE, "plan", {"step": 2}, writer="b", expected_version=1).version == 2
    stale = board.set(SCOPE, "plan", {"step": 3}, writer="a", expected_version=1)
    assert not stale.landed and stale.current.value == {"step": 2}  # type: ignore[union-attr]
    assert board.set(SCOPE, "plan", "blind", writer="c").version == 3  # no expectation
    assert not board.set(SCOPE, "ghost", 1, writer="a", expected_version=4).landed

    gone = board.delete(SCOPE, "plan", writer="a", expected_version=3)
    assert gone is not None and (gone.landed, gone.version) == (True, 4)
    assert board.delete(SCOPE, "plan", writer="a") is None  # nothing left to delete
    tomb = board.get(SCOPE, "plan")
    assert tomb is not None and tomb.deleted and tomb.value is None and tomb.version == 4
    assert board.set(SCOPE, "plan", "again", writer="a", expected_version=4).version == 5
    history = board.history(SCOPE, "plan")
    assert [(h.version, h.op, h.value, h.writer) for h in history] == [
        (1, "set", {"step": 1}, "a"),
        (2, "set", {"step": 2}, "b"),
        (3, "set", "blind", "c"),
        (4, "delete", None, "a"),
        (5, "set", "again", "a"),
    ]


def test_idempotent_writes_prefixes_scopes_and_limits(store: Store, sd_home: Path) -> None:
    catalog = _catalog()
    board = Blackboard(catalog.engine, catalog.redact)
    once = board.set(SCOPE, "k", 1, writer="a", write_id="call-1")
    again = board.set(SCOPE, "k", 1, writer="a", write_id="call-1")
    assert (once.version, again.version, again.repeated) == (1, 1, True)
    assert len(board.history(SCOPE, "k")) == 1
    for key in ("a_1", "a%2", "ab", "b"):
        board.set(SCOPE, key, key, writer="a")
    assert [e.key for e in board.list(SCOPE, "a_")] == ["a_1"]  # LIKE wildcards are literal
    assert [e.key for e in board.list(SCOPE, "a")] == ["a%2", "a_1", "ab"]
    other = Scope("tree", "head")
    assert board.list(other) == [] and board.get(other, "k") is None  # scopes do not mix
    assert board.set(SCOPE, "secret", {"pw": "hunter2"}, writer="a").landed
    assert board.get(SCOPE, "secret").value == {"pw": "[redacted]"}  # type: ignore[union-attr]
    with pytest.raises(UsageError, match="over 64 KB"):
        board.set(SCOPE, "big", "x" * MAX_VALUE_BYTES, writer="a")
    with pytest.raises(UsageError, match="1 to 200 characters"):
        board.set(SCOPE, "", 1, writer="a")
    assert ({s.kind for s, _ in board.scopes()}) == {"swarm"}


def test_scopes_of_sessions(store: Store, sd_home: Path) -> None:
    catalog = _catalog()
    bare_session(catalog, "head", group="head")
    bare_session(catalog, "member", group="head", parent="head", root="head")
    bare_session(catalog, "loner")
    bare_session(catalog, "child", parent="loner", root="loner")
    member, loner, child = (catalog.get_session(s) for s in ("member", "loner", "child"))
    assert scope_for(member, None) == Scope("swarm", "head")
    assert scope_for(member, "tree") == Scope("tree", "head")
    assert scope_for(child, None) == Scope("tree", "loner")  # outside a swarm: its tree's
    assert scope_for(loner, "store") == Scope("store", "*")
    with pytest.raises(UsageError, match="not in a swarm"):
        scope_for(loner, "swarm")


async def test_the_tools_as_a_session_calls_them(store: Store, sd_home: Path) -> None:
    catalog = _catalog()
    bare_session(catalog, "head", group="head")
    bare_session(catalog, "member", group="head", parent="head", root="head")
    bare_session(catalog, "loner")

    async def call(sid: str, name: str, call_key: str, **args: object):
        ctx = ToolContext(sid, Path("."), "explore", Path("."), {"catalog": catalog}, call_key)
        return await TOOLS[name].call(ctx, json.dumps(args))

    wrote = await call("member", "memory_set", "1:a", key="k", value=[1, 2], expected_version=0)
    assert json.loads(wrote.content) == {"key": "k", "written": True, "version": 1}
    # The same call run again (after a crash) lands nothing new.
    again = await call("member", "memory_set", "1:a", key="k", value=[1, 2], expected_version=0)
    assert json.loads(again.content) == json.loads(wrote.content)
    conflict = await call("member", "memory_set", "2:a", key="k", value=3, expected_version=0)
    assert conflict.is_error and '"current_version": 1, "current_value": [1, 2]' in conflict.content
    got = await call("head", "memory_get", "3:a", key="k")  # the coordinator sees it too
    assert json.loads(got.content) == {"key": "k", "found": True, "version": 1, "value": [1, 2]}
    listed = await call("member", "memory_list", "4:a", prefix="")
    assert json.loads(listed.content) == {
        "scope": "swarm",
        "keys": [{"key": "k", "version": 1, "value": [1, 2]}],
    }
    deleted = await call("member", "memory_delete", "5:a", key="k")
    assert json.loads(deleted.content) == {"key": "k", "deleted": True, "version": 2}
    missing = await call("member", "memory_get", "6:a", key="k")
    assert json.loads(missing.content) == {"key": "k", "found": False, "version": 2}
    refused = await call("loner", "memory_set", "7:a", key="k", value=1, scope="swarm")
    assert refused.is_error and "is not in a swarm" in refused.content
    own = await call("loner", "memory_set", "8:a", key="k", value=1)
    assert not own.is_error  # outside a swarm it writes its tree's blackboard
    assert (
        json.loads((await call("member", "memory_get", "9:a", key="k")).content)["found"] is False
    )


def test_memory_cli_bad_input(sd_home: Path) -> None:
    cases = {
        ("memory", "get", "k"): "which blackboard? pass --session ID",
        ("memory", "ls", "--scope", "swarm"): "--scope swarm needs --session ID",
        ("memory", "ls", "--scope", "galaxy"): "unknown scope 'galaxy'",
        ("memory", "get", "k", "--session", "nope"): "no session nope",
        ("memory", "get", "k", "--scope", "store"): "no key 'k' in the store blackboard",
    }
    for args, needle in cases.items():
        res = run_cli(sd_home, *args)
        assert res.code == 2, (args, res.stderr)
        assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
