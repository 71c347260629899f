"""The credential store: one 0600 key file per provider in a 0700 directory, or the OS keyring."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import stat
from pathlib import Path
from types import ModuleType

from swarmdeck.errors import CredentialError
from swarmdeck.filemodes import replace_atomically

PROVIDER_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
KEYRING_ENV = "SWARMDECK_KEYRING"
KEYRING_SERVICE = "swarmdeck"
KEY_SUFFIX = ".key"
# A keyring-held key leaves an empty marker file, so providers() can list it without asking
# the keyring (which has no portable "list entries" call).
MARKER_SUFFIX = ".keyring"
DIR_MODE = 0o700
FILE_MODE = 0o600
# Keys are short; a bigger file is a mistake (a pasted PEM, a log) and is refused, not read.
MAX_KEY_BYTES = 16_384


def validate_provider(provider: str) -> str:
    """Return the provider name, or raise CredentialError if it is not a safe file name."""
    if not isinstance(provider, str) or not PROVIDER_RE.match(provider):
        # The bad name is not echoed: a swapped (provider, key) pair would print the key.
        raise CredentialError(
            "invalid provider name",
            hint="use 1-64 lowercase letters, digits, '-' or '_', starting with a letter or digit",
        )
    return provider


def _keyring() -> ModuleType | None:
    """The keyring module, only when importable and opted into with SWARMDECK_KEYRING=1."""
    if os.environ.get(KEYRING_ENV) != "1":
        return None
    try:
        return importlib.import_module("keyring")
    except ImportError:
        return None


def _refuse_loose(path: Path, mode: int, wanted: int) -> None:
    """Raise if `path` grants any permission to group or others."""
    if mode & 0o077:
        kind = "directory" if wanted == DIR_MODE else "file"
        raise CredentialError(
            f"credential {kind} {path} is accessible by group or others "
            f"(mode {stat.S_IMODE(mode):o}); fix it with: chmod {wanted:o} {path}",
            hint=f"chmod {wanted:o} {path}",
        )


class CredentialStore:
    """Provider keys as `<dir>/<provider>.key` files (0600 in a 0700 dir), or the OS keyring."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"CredentialStore({str(self.directory)!r})"

    def _key_path(self, provider: str) -> Path:
        return self.directory / f"{validate_provider(provider)}{KEY_SUFFIX}"

    def _marker_path(self, provider: str) -> Path:
        return self.directory / f"{validate_provider(provider)}{MARKER_SUFFIX}"

    def _check_dir(self) -> None:
        """Refuse a credential dir that others can read or that is not a real directory."""
        st = os.lstat(self.directory)
        if not stat.S_ISDIR(st.st_mode):
            raise CredentialError(f"credential directory {self.directory} is not a directory")
        _refuse_loose(self.directory, st.st_mode, DIR_MODE)

    def _ensure_dir(self) -> None:
        """Create the dir at 0700 (chmod after mkdir, so the umask cannot widen it)."""
        self.directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.directory.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass
        else:
            os.chmod(self.directory, DIR_MODE)
        self._check_dir()

    def set(self, provider: str, key: str) -> None:
        """Store `key` for `provider`, replacing any previous key."""
        path = self._key_path(provider)
        key = (key or "").strip()
        if not key or "\n" in key or "\r" in key:
            raise CredentialError("a key must be one non-empty line", hint="check what you pasted")
        try:
            self._ensure_dir()
            ring = _keyring()
            if ring is not None:
                self._set_keyring(ring, provider, key)
                # No plaintext copy may linger once the keyring holds the key.
                path.unlink(missing_ok=True)
                self._write_private(self._marker_path(provider), b"")
                return
            self._write_private(path, key.encode() + b"\n")
            self._marker_path(provider).unlink(missing_ok=True)
        except OSError as exc:
            # A read-only or full home: the key that was stored (if any) is still there.
            raise CredentialError(
                f"cannot store the key in {self.directory}: {exc.strerror or type(exc).__name__}",
                hint="the swarmdeck home (SWARMDECK_HOME) must be a writable directory",
            ) from None

    def _set_keyring(self, ring: ModuleType, provider: str, key: str) -> None:
        try:
            ring.set_password(KEYRING_SERVICE, provider, key)
        except Exception as exc:  # keyring backends raise their own error types
            raise CredentialError(
                f"the OS keyring refused to store the key for {provider}: {type(exc).__name__}",
                hint=f"unset {KEYRING_ENV} to use key files",
            ) from None

    def _write_private(self, path: Path, data: bytes) -> None:
        """Write atomically through a 0600 temp file; fchmod makes the mode umask-proof."""
        replace_atomically(path, data, FILE_MODE)

    def get(self, provider: str) -> str | None:
        """The key for `provider`, or None if none is stored."""
        path = self._key_path(provider)
        if not self.directory.exists():
            return None
        self._check_dir()
        ring = _keyring()
        if ring is not None and self._marker_path(provider).exists():
            return self._get_keyring(ring, provider)
        return self._read_private(path)

    def _get_keyring(self, ring: ModuleType, provider: str) -> str | None:
        try:
            value = ring.get_password(KEYRING_SERVICE, provider)
        except Exception as exc:  # keyring backends raise their own error types
            raise CredentialError(
                f"the OS keyring refused to read the key for {provider}: {type(exc).__name__}",
                hint=f"unset {KEYRING_ENV} to use key files",
            ) from None
        return (value or "").strip() or None

    def _read_private(self, path: Path) -> str | None:
        """Read a key file, refusing symlinks and files others can read (checked on the fd)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CredentialError(
                f"cannot read credential file {path}: {exc.strerror}",
                hint="a key file must be a regular file, not a symlink",
            ) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise CredentialError(f"credential file {path} is not a regular file")
            _refuse_loose(path, st.st_mode, FILE_MODE)
            if st.st_size > MAX_KEY_BYTES:
                raise CredentialError(f"credential file {path} is too large to be a key")
            data = os.read(fd, MAX_KEY_BYTES + 1)
        finally:
            os.close(fd)
        return data.decode("utf-8", errors="replace").strip() or None

    def remove(self, provider: str) -> bool:
        """Delete the key for `provider`; True if there was one."""
        path, marker = self._key_path(provider), self._marker_path(provider)
        removed = False
        if marker.exists():
            ring = _keyring()
            if ring is not None:
                with contextlib.suppress(Exception):  # already gone from the keyring is fine
                    ring.delete_password(KEYRING_SERVICE, provider)
            marker.unlink(missing_ok=True)
            removed = True
        if path.exists() or path.is_symlink():
            path.unlink()
            removed = True
        return removed

    def has(self, provider: str) -> bool:
        """True if a key (file or keyring marker) is stored for `provider`."""
        return self._key_path(provider).exists() or self._marker_path(provider).exists()

    def providers(self) -> list[str]:
        """Names of the providers that have a stored key, sorted."""
        if not self.directory.is_dir():
            return []
        names = set()
        for entry in self.directory.iterdir():
            for suffix in (KEY_SUFFIX, MARKER_SUFFIX):
                stem = entry.name.removesuffix(suffix)
                if entry.name.endswith(suffix) and PROVIDER_RE.match(stem):
                    names.add(stem)
        return sorted(names)
