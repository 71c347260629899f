"""What an unusable store is told as: one line that says what to do, with no password."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.catalog.db import store_error
from swarmdeck.errors import StoreError


def test_a_driver_echoing_the_password_is_masked() -> None:
    url = "postgresql://sd:s3cret-pw@db.example/sd?password=q-s3cret&sslmode=require"
    err = store_error(url, Exception("could not connect with s3cret-pw / q-s3cret"))
    line = err.one_line()
    assert "s3cret" not in line and "sslmode" not in line
    assert line.startswith("cannot open the store postgresql://sd:***@db.example/sd: ")


def test_catalog_open_maps_a_corrupt_file_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    path.write_bytes(b"\x00garbage" * 512)
    with pytest.raises(StoreError, match="is not a SQLite database"):
        Catalog.open(f"sqlite:///{path}")
    assert path.read_bytes() == b"\x00garbage" * 512


def test_catalog_open_lets_a_bug_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only what the store itself does wrong is a StoreError; our own errors stay loud.
    from swarmdeck.catalog import catalog as module

    def broken(_engine: object) -> None:
        raise sqlite3.ProgrammingError("a bug of ours")

    monkeypatch.setattr(module.migrations, "create_all", broken)
    with pytest.raises(sqlite3.ProgrammingError):
        Catalog.open(f"sqlite:///{tmp_path / 'ok.sqlite'}")


def _locked_write(path: Path) -> Exception:
    """The error a write meets while another process holds the store's write lock."""
    from swarmdeck.catalog.db import create_db_engine

    engine = create_db_engine(f"sqlite:///{path}", wait_for_locks=False)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    except Exception as exc:
        return exc
    finally:
        holder.close()
        engine.dispose()
    raise AssertionError("the write did not wait for the lock")


def test_a_store_kept_locked_is_told_with_its_fix(tmp_path: Path) -> None:
    from swarmdeck.catalog.db import locked_store_error

    store = tmp_path / "store.sqlite"
    exc = _locked_write(store)
    wrapped = RuntimeError("a step failed")
    wrapped.__cause__ = exc  # as DBOS or our own layers re-raise it
    for seen in (exc, wrapped):
        err = locked_store_error(seen, f"sqlite:///{store}")
        assert err is not None and f"the store {store} stayed locked" in err.message
        assert "another process holds its write lock" in err.message
        assert f"`fuser -v {store}`" in err.hint
    other = sqlite3.OperationalError("no such table: t")
    assert locked_store_error(other, f"sqlite:///{store}") is None


def test_dispatch_answers_a_locked_store_with_the_contract_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import json

    from swarmdeck.cli import dispatch

    exc = _locked_write(tmp_path / "store.sqlite")

    def locked(*_args: object, **_kwargs: object) -> int:
        raise exc

    monkeypatch.setattr(dispatch, "run_contract", locked)
    monkeypatch.setattr(dispatch, "dispatch_options", lambda **_values: None)
    with pytest.raises(SystemExit) as ended:
        dispatch.contract_main({}, started_line=True, json_errors=True)
    assert ended.value.code == 2
    out, err = capfd.readouterr()
    assert json.loads(out)["type"] == "swarmdeck.error"
    assert err.startswith("swarmdeck: error: the store ") and "stayed locked" in err
    assert "internal" not in err
