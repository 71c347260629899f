"""Issue 10, holes 4, 5 and 7: artifacts reach one session tree, the store is private from
creation, and an id holding a key is refused, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.config import load_settings
from swarmdeck.errors import UsageError
from swarmdeck.secrets.redact import Redactor, default_redactor, set_default_redactor
from swarmdeck.secrets.store import CredentialStore
from swarmdeck.tools.base import ToolContext
from swarmdeck.tools.builtins.artifacts import ARTIFACT_TOOLS, store_artifact
from tests.conftest import Store, run_cli

KEY = "sk-store10-" + "Zq8w" * 8
WRITE, READ, LIST = ARTIFACT_TOOLS


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """A permissive umask, as many users have: only swarmdeck's own modes protect the store."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture
def catalog(store: Store) -> Iterator[Catalog]:
    redactor = Redactor([KEY])
    before = default_redactor()
    set_default_redactor(redactor)
    cat = Catalog.open(store.url, redactor.redact)
    yield cat
    cat.engine.dispose()
    set_default_redactor(before)


def _session(cat: Catalog, sid: str, parent: str | None = None, root: str | None = None) -> None:
    cat.create_session(
        session_id=sid, model="fake:m", mode="explore", workdir="/tmp", run_dir="/tmp",
        task="t", parent_id=parent, root_id=root, depth=1 if parent else 0,
    )  # fmt: skip


def _ctx(cat: Catalog, sid: str) -> ToolContext:
    services = {"catalog": cat, "settings": load_settings()}
    return ToolContext(sid, Path("/tmp"), "explore", Path("/tmp"), services=services)


# --- hole 4: artifacts by tree ----------------------------------------------------------------


async def test_artifacts_reach_only_the_callers_tree(catalog: Catalog, sd_home: Path) -> None:
    _session(catalog, "rootA")
    _session(catalog, "childA", parent="rootA", root="rootA")
    _session(catalog, "rootB")
    for sid in ("rootA", "childA", "rootB"):
        out = await WRITE.call(
            _ctx(catalog, sid), json.dumps({"name": "r.md", "content": f"of {sid}"})
        )
        assert not out.is_error, out.content
    child = _ctx(catalog, "childA")
    mine = await READ.call(child, json.dumps({"name": "r.md", "session_id": "rootA"}))
    assert mine.content == "of rootA"
    up = await READ.call(_ctx(catalog, "rootA"), json.dumps({"name": "artifact://childA/r.md"}))
    assert up.content == "of childA"
    for args in ({"name": "r.md", "session_id": "rootB"}, {"name": "artifact://rootB/r.md"}):
        out = await READ.call(child, json.dumps(args))
        assert out.permission_denied and "not in your session tree" in out.content
        assert "of rootB" not in out.content
    listing = await LIST.call(child, json.dumps({"session_id": "rootB"}))
    assert listing.permission_denied and "rootB/r.md" not in listing.content
    # An unknown session answers the same as another tree's: ids cannot be probed.
    ghost = await LIST.call(child, json.dumps({"session_id": "nobody"}))
    assert ghost.content == listing.content.replace("rootB", "nobody")


# --- hole 5: a private store ------------------------------------------------------------------


def test_the_store_is_private_from_creation(
    catalog: Catalog, store: Store, sd_home: Path, loose_umask: None
) -> None:
    settings = load_settings()
    assert _mode(settings.home) == 0o700
    _session(catalog, "s1")
    catalog.append_event("s1", "k1", "user", {"text": "hello"})
    if not store.is_postgres:
        db = sd_home / "swarmdeck.sqlite"
        sides = [db, *(db.with_name(db.name + s) for s in ("-wal", "-shm"))]
        assert all(p.exists() for p in sides)
        assert {p.name: _mode(p) for p in sides} == {p.name: 0o600 for p in sides}
    store_artifact(catalog, settings.artifacts_dir, "s1", "a.txt", b"x", 1000)
    art = settings.artifacts_dir / "s1" / "a.txt"
    assert (_mode(settings.artifacts_dir), _mode(art.parent), _mode(art)) == (0o700, 0o700, 0o600)


def test_an_existing_loose_home_is_tightened_with_a_note(sd_home: Path) -> None:
    os.chmod(sd_home, 0o755)
    (sd_home / "swarmdeck.sqlite").touch(mode=0o644)
    os.chmod(sd_home / "swarmdeck.sqlite", 0o644)
    first = run_cli(sd_home, "status")
    assert first.code == 0, first.stderr
    notes = [line for line in first.stderr.splitlines() if "made it 700" in line]
    assert len(notes) == 1 and str(sd_home) in notes[0]
    assert _mode(sd_home) == 0o700 and _mode(sd_home / "swarmdeck.sqlite") == 0o600
    assert "made it 700" not in run_cli(sd_home, "status").stderr  # once


# --- hole 7: ids holding a key ----------------------------------------------------------------


def test_a_key_used_as_a_message_id_is_refused(store: Store, sd_home: Path) -> None:
    CredentialStore(sd_home / "credentials").set("openai", KEY)
    cat = Catalog.open(store.url, Redactor([KEY]).redact)
    _session(cat, "s1")
    res = run_cli(sd_home, "sessions", "send", "s1", "hello", "--id", KEY)
    assert res.code == 2 and KEY not in res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [
        "swarmdeck: error: message id refused: it contains a credential (pick another message id)"
    ]
    ok = run_cli(sd_home, "sessions", "send", "s1", "hello", "--id", "retry-1")
    assert ok.code == 0, ok.stderr
    with cat.engine.connect() as conn:
        ids = [r[0] for r in conn.execute(sa.select(schema.inbox.c.msg_id))]
    assert ids == ["retry-1"]
    with pytest.raises(UsageError, match="session id refused"):
        _session(cat, f"x{KEY}")
    cat.engine.dispose()
    if not store.is_postgres:
        for path in sd_home.glob("swarmdeck.sqlite*"):
            assert KEY.encode() not in path.read_bytes()
