"""A real `swarmdeck portal` process on a free loopback port, for the portal's tests."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.cookiejar import CookieJar
from pathlib import Path

from tests.conftest import cli_env

URL_LINE = re.compile(r"^portal: (?P<base>https?://[^/]+)/login\?token=(?P<token>\S+)$", re.M)


@dataclass
class Portal:
    """A running portal: its base URL, its one-time sign-in token, its process."""

    base: str
    one_time: str
    proc: subprocess.Popen[str]

    @property
    def sign_in_url(self) -> str:
        """The URL the portal printed."""
        return f"{self.base}/login?token={self.one_time}"


@contextmanager
def running_portal(home: Path, *args: str) -> Iterator[Portal]:
    """Start `swarmdeck portal --port 0 ARGS`; stop it at the end."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmdeck", "portal", "--port", "0", *args],
        env=cli_env(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = URL_LINE.match(line.strip())
        assert found, (
            f"the portal printed {line!r}; stderr: {proc.stderr.read() if proc.poll() is not None and proc.stderr else ''}"
        )
        portal = Portal(found["base"], found["token"], proc)
        _wait_until_serving(portal)
        yield portal
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait_until_serving(portal: Portal, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            urllib.request.urlopen(f"{portal.base}/login", timeout=5).read()
            return
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Client:
    """A cookie-keeping HTTP client (urllib), redirects followed for GETs only."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), _NoPostRedirect()
        )

    def get(self, path: str, **headers: str) -> tuple[int, str]:
        """GET a path: status and body."""
        return self._open(urllib.request.Request(self.base + path, headers=headers))

    def post(self, path: str, form: dict[str, str], **headers: str) -> tuple[int, str]:
        """POST a form: status and body (a redirect is not followed)."""
        data = urllib.parse.urlencode(form).encode()
        return self._open(
            urllib.request.Request(self.base + path, data=data, headers=headers, method="POST")
        )

    def _open(self, request: urllib.request.Request) -> tuple[int, str]:
        try:
            with self.opener.open(request, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


class _NoPostRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        if req.get_method() == "POST":
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found[1]
