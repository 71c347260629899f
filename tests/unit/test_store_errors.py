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
