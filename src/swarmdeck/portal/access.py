"""Who may see and do what: a browser signs in with a token (the one-time token the portal
printed, or a named one) and gets a cookie for a sign-in kept in memory; forms carry that
sign-in's CSRF token, and an action needs the operator role, checked here, server-side."""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass

from starlette.requests import Request

from swarmdeck.portal.tokens import OPERATOR, TokenStore, digest, new_secret

COOKIE = "swarmdeck_portal"
# A browser sign-in lasts a working day; the token behind it is checked at every request.
LOGIN_TTL_S = 12 * 3600


@dataclass
class Login:
    """One signed-in browser."""

    role: str
    token_name: str
    token_digest: str
    csrf: str
    expires_at: float
    # A script's request with `Authorization: Bearer`: no cookie rides along with it, so
    # no other site can forge it and it needs no CSRF token.
    bearer: bool = False

    @property
    def operator(self) -> bool:
        """True when this sign-in may act on sessions."""
        return self.role == OPERATOR


class AccessError(Exception):
    """A request refused: its HTTP status and a line saying what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Access:
    """The portal's sign-ins: the one-time token, named tokens, cookies and CSRF."""

    def __init__(self, tokens: TokenStore) -> None:
        self.tokens = tokens
        self._logins: dict[str, Login] = {}
        # Printed with the URL at start-up; it signs one browser in, as an operator, once.
        self.one_time_token = new_secret()
        self._one_time: str | None = digest(self.one_time_token)

    def sign_in(self, secret: str) -> tuple[str, Login]:
        """A new sign-in for this token (the one-time token works once); its cookie value."""
        secret = secret.strip()
        if self._one_time and hmac.compare_digest(digest(secret), self._one_time):
            self._one_time = None
            login = self._login(OPERATOR, "one-time", "")
        elif (token := self.tokens.check(secret)) is not None:
            login = self._login(token.role, token.name, token.digest)
        else:
            raise AccessError(
                401,
                "that token is not valid (a one-time token works once): make one with "
                "`swarmdeck portal token add NAME --role viewer|operator`",
            )
        cookie = secrets.token_urlsafe(32)
        self._logins[cookie] = login
        return cookie, login

    def _login(self, role: str, name: str, token_digest: str) -> Login:
        return Login(role, name, token_digest, secrets.token_urlsafe(24), time.time() + LOGIN_TTL_S)

    def who(self, request: Request) -> Login:
        """The request's sign-in (its cookie, or a bearer token), or AccessError 401."""
        bearer = request.headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            token = self.tokens.check(bearer[7:].strip())
            if token is None:
                raise AccessError(401, "the bearer token is not valid")
            login = self._login(token.role, token.name, token.digest)
            login.bearer = True
            return login
        login = self._logins.get(request.cookies.get(COOKIE, ""))
        if login is None or login.expires_at < time.time():
            raise AccessError(401, "sign in with a portal token first")
        if login.token_digest and not self.tokens.current(login.token_name, login.token_digest):
            self._logins.pop(request.cookies.get(COOKIE, ""), None)
            raise AccessError(401, f"the token {login.token_name!r} was revoked")
        return login

    def sign_out(self, request: Request) -> None:
        """Forget this browser's sign-in."""
        self._logins.pop(request.cookies.get(COOKIE, ""), None)

    def may_act(self, login: Login, form_csrf: str) -> None:
        """Refuse an action by a viewer, or a form without this sign-in's CSRF token."""
        if not login.operator:
            raise AccessError(
                403, f"the token {login.token_name!r} is a viewer's: it may look, not act"
            )
        if login.bearer:
            return
        if not form_csrf or not hmac.compare_digest(form_csrf, login.csrf):
            raise AccessError(403, "the form's CSRF token is missing or stale: reload the page")
