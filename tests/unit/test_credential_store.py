"""The credential store: modes, refusals, validation, and the optional keyring."""

from __future__ import annotations

import os
import stat
import sys
import types
from pathlib import Path

import pytest

from swarmdeck.errors import CredentialError
from swarmdeck.secrets.store import CredentialStore

KEY = "sk-test-0123456789abcdefghij"


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def _no_keyring(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWARMDECK_KEYRING", raising=False)


def test_set_get_round_trip_with_private_modes(tmp_path: Path) -> None:
    old = os.umask(0)  # the widest umask: modes must not depend on it
    try:
        store = CredentialStore(tmp_path / "home" / "credentials")
        store.set("openai", KEY)
    finally:
        os.umask(old)
    assert store.get("openai") == KEY
    assert _mode(store.directory) == 0o700
    assert _mode(store.directory / "openai.key") == 0o600
    assert store.has("openai") and not store.has("glm")
    assert store.get("glm") is None


def test_set_replaces_and_lists_providers(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "credentials")
    store.set("kimi", "first-key-123456")
    store.set("kimi", "second-key-123456\n")
    store.set("glm", "glm-key-1234567")
    assert store.get("kimi") == "second-key-123456"
    assert store.providers() == ["glm", "kimi"]
    # No temp files left behind by the atomic write.
    assert sorted(p.name for p in store.directory.iterdir()) == ["glm.key", "kimi.key"]


def test_remove(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "credentials")
    store.set("glm", KEY)
    assert store.remove("glm") is True
    assert store.remove("glm") is False
    assert store.get("glm") is None and store.providers() == []


def test_missing_dir_means_no_keys(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "nowhere")
    assert store.get("openai") is None
    assert store.providers() == []
    assert not store.has("openai")


def test_loose_key_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "credentials")
    store.set("openai", KEY)
    key_file = store.directory / "openai.key"
    key_file.chmod(0o644)
    with pytest.raises(CredentialError) as err:
        store.get("openai")
    assert str(key_file) in err.value.message
    assert f"chmod 600 {key_file}" in err.value.one_line()
    assert KEY not in err.value.one_line()


def test_loose_dir_is_refused_with_the_fix(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "credentials")
    store.set("openai", KEY)
    store.directory.chmod(0o755)
    with pytest.raises(CredentialError, match="chmod 700"):
        store.get("openai")
    with pytest.raises(CredentialError, match="chmod 700"):
        store.set("glm", KEY)


def test_symlinked_key_file_is_refused(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "credentials")
    store.set("openai", KEY)
    elsewhere = tmp_path / "elsewhere.key"
    elsewhere.write_text("other-key-123456")
    elsewhere.chmod(0o600)
    (store.directory / "glm.key").symlink_to(elsewhere)
    with pytest.raises(CredentialError, match="symlink"):
        store.get("glm")


@pytest.mark.parametrize("name", ["", "OpenAI", "../etc", "a/b", "-x", "x" * 65, "a.key"])
def test_invalid_provider_names_are_refused(tmp_path: Path, name: str) -> None:
    store = CredentialStore(tmp_path / "credentials")
    with pytest.raises(CredentialError, match="invalid provider name"):
        store.set(name, KEY)
    with pytest.raises(CredentialError):
        store.get(name)


def test_empty_or_multiline_key_is_refused(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "credentials")
    for bad in ("", "   ", "a\nb"):
        with pytest.raises(CredentialError):
            store.set("openai", bad)


def test_repr_never_shows_a_key(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path / "credentials")
    store.set("openai", KEY)
    assert KEY not in repr(store)


class _FakeKeyring(types.ModuleType):
    """An in-memory stand-in for the `keyring` module."""

    def __init__(self) -> None:
        super().__init__("keyring")
        self.entries: dict[tuple[str, str], str] = {}

    def set_password(self, service: str, user: str, secret: str) -> None:
        self.entries[(service, user)] = secret

    def get_password(self, service: str, user: str) -> str | None:
        return self.entries.get((service, user))

    def delete_password(self, service: str, user: str) -> None:
        del self.entries[(service, user)]


def test_keyring_used_only_when_opted_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ring = _FakeKeyring()
    monkeypatch.setitem(sys.modules, "keyring", ring)
    store = CredentialStore(tmp_path / "credentials")
    store.set("glm", "file-key-123456")  # not opted in: a file
    assert (store.directory / "glm.key").exists() and not ring.entries

    monkeypatch.setenv("SWARMDECK_KEYRING", "1")
    store.set("openai", KEY)
    assert ring.entries == {("swarmdeck", "openai"): KEY}
    assert not (store.directory / "openai.key").exists()  # no plaintext copy
    assert store.get("openai") == KEY
    assert store.providers() == ["glm", "openai"]
    assert store.remove("openai") is True
    assert ring.entries == {} and store.get("openai") is None
