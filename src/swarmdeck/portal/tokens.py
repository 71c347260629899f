"""Portal access tokens: kept hashed in the home (a 0600 file), each with a role. A token
is shown once, when it is made; the file holds only its SHA-256, which is enough for a
random 256-bit secret (no password stretching is needed when nothing can be guessed)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from swarmdeck.errors import UsageError

VIEWER = "viewer"
OPERATOR = "operator"
ROLES = (VIEWER, OPERATOR)
# A prefix the redactor and a person both recognise in a pasted line.
TOKEN_PREFIX = "sdp_"


def digest(secret: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    """A fresh token: 256 random bits."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class PortalToken:
    """One named token: its role and its digest, never the token itself."""

    name: str
    role: str
    digest: str
    created_at: float


class TokenStore:
    """The named tokens of one home, read again whenever the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[float, int] | None = None
        self._tokens: dict[str, PortalToken] = {}

    def _load(self) -> dict[str, PortalToken]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._seen, self._tokens = None, {}
            return self._tokens
        mark = (st.st_mtime, st.st_size)
        if mark != self._seen:
            raw = json.loads(self.path.read_text() or "[]")
            self._tokens = {t["name"]: PortalToken(**t) for t in raw}
            self._seen = mark
        return self._tokens

    def _save(self, tokens: dict[str, PortalToken]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump([asdict(t) for t in tokens.values()], f, indent=1)
        os.replace(tmp, self.path)
        self._seen = None

    def add(self, name: str, role: str) -> str:
        """Make a token; returns it (the only time it is shown)."""
        if role not in ROLES:
            raise UsageError(f"unknown role {role!r}", f"use one of: {', '.join(ROLES)}")
        if not name or not name.replace("-", "").replace("_", "").isalnum():
            raise UsageError(
                f"bad token name {name!r}", "use letters, digits, '-' and '_' (e.g. alice-phone)"
            )
        tokens = dict(self._load())
        if name in tokens:
            raise UsageError(
                f"a token named {name!r} exists already",
                f"revoke it first (`swarmdeck portal token revoke {name}`) or pick another name",
            )
        secret = new_secret()
        tokens[name] = PortalToken(name, role, digest(secret), time.time())
        self._save(tokens)
        return secret

    def list(self) -> list[PortalToken]:
        """Every named token, oldest first."""
        return sorted(self._load().values(), key=lambda t: t.created_at)

    def revoke(self, name: str) -> None:
        """Remove a token: every browser signed in with it loses access at its next request."""
        tokens = dict(self._load())
        if tokens.pop(name, None) is None:
            raise UsageError(
                f"no portal token named {name!r}", "`swarmdeck portal token ls` names them"
            )
        self._save(tokens)

    def check(self, secret: str) -> PortalToken | None:
        """The token this secret is, or None."""
        wanted = digest(secret)
        for token in self._load().values():
            if hmac.compare_digest(token.digest, wanted):
                return token
        return None

    def current(self, name: str, token_digest: str) -> bool:
        """True while the named token still stands with this digest (not revoked)."""
        token = self._load().get(name)
        return token is not None and hmac.compare_digest(token.digest, token_digest)
