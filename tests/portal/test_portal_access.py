"""Who may see and do what in the portal, over real HTTP to a real `swarmdeck portal`:
nothing without a token, the one-time token works once, tokens are kept hashed, a
viewer's action is refused server-side, a form needs its CSRF token, a revoked token
stops working, and a key stored in a transcript never reaches a page or a stream."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

from swarmdeck.catalog.catalog import Catalog
from tests.conftest import Store, cli_env, run_cli
from tests.portal.portal_support import Client, csrf_of, running_portal
from tests.ui.seed import seed_fleet

KEY = "sk-portal-test-0123456789abcdefghij"


def _token(home: Path, name: str, role: str) -> str:
    result = run_cli(home, "portal", "token", "add", name, "--role", role)
    assert result.code == 0, result.stderr
    return result.stdout.strip()


def test_nothing_is_served_without_a_token(sd_home: Path, tmp_path: Path) -> None:
    seeded = seed_fleet(Catalog.open(f"sqlite:///{sd_home / 'swarmdeck.sqlite'}"), tmp_path)
    with running_portal(sd_home) as portal:
        stranger = Client(portal.base)
        for path in ("/", "/sessions", f"/s/{seeded.asker}", f"/s/{seeded.asker}/stream"):
            code, body = stranger.get(path)
            assert code == 401, (path, code)
            assert seeded.question not in body
        # A browser asking for a page is sent to the sign-in form, and back after it.
        code, body = stranger.get("/sessions", Accept="text/html")
        assert code == 200 and 'name="token"' in body and 'value="/sessions"' in body
        code, _ = stranger.post(f"/s/{seeded.asker}/cancel", {"csrf": "x"})
        assert code == 401


def test_the_one_time_token_signs_in_once_as_an_operator(sd_home: Path, tmp_path: Path) -> None:
    seed_fleet(Catalog.open(f"sqlite:///{sd_home / 'swarmdeck.sqlite'}"), tmp_path)
    with running_portal(sd_home) as portal:
        first = Client(portal.base)
        code, body = first.get(f"/login?token={portal.one_time}")
        assert code == 200 and "Fleet" in body and "operator" in body
        second = Client(portal.base)
        code, body = second.get(f"/login?token={portal.one_time}")
        assert code == 401 and "works once" in body
        assert second.get("/sessions")[0] == 401


def test_tokens_are_stored_hashed_with_their_roles(sd_home: Path) -> None:
    secret = _token(sd_home, "alice-phone", "viewer")
    assert secret.startswith("sdp_") and len(secret) > 40
    path = sd_home / "portal" / "tokens.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert secret not in path.read_text()
    [stored] = json.loads(path.read_text())
    assert stored["name"] == "alice-phone" and stored["role"] == "viewer"
    listed = run_cli(sd_home, "portal", "token", "ls")
    assert "alice-phone" in listed.stdout and "viewer" in listed.stdout
    assert secret not in listed.stdout + listed.stderr
    bad = run_cli(sd_home, "portal", "token", "add", "bob", "--role", "admin")
    assert bad.code == 2 and "unknown role 'admin'" in bad.stderr and "Traceback" not in bad.stderr
    again = run_cli(sd_home, "portal", "token", "add", "alice-phone")
    assert again.code == 2 and "exists already" in again.stderr


def test_a_viewer_may_look_but_its_actions_are_refused(sd_home: Path, tmp_path: Path) -> None:
    catalog = Catalog.open(f"sqlite:///{sd_home / 'swarmdeck.sqlite'}")
    seeded = seed_fleet(catalog, tmp_path)
    viewer_token = _token(sd_home, "watcher", "viewer")
    with running_portal(sd_home) as portal:
        viewer = Client(portal.base)
        code, body = viewer.get(f"/login?token={viewer_token}")
        assert code == 200 and "viewer" in body
        code, page = viewer.get(f"/s/{seeded.waiter}")
        assert code == 200 and "you can look, not act" in page
        assert 'action="/s/' not in page  # no form is offered...
        # ...and a forged one is refused by the server, not just hidden.
        for action in ("cancel", "send", "answer", "resume"):
            code, body = viewer.post(f"/s/{seeded.waiter}/{action}", {"csrf": "", "text": "hi"})
            assert code == 403 and "viewer" in body, action
        assert catalog.get_session(seeded.waiter).status == "waiting"
        # With a bearer header too.
        bearer = Client(portal.base)
        code, _ = bearer.post(
            f"/s/{seeded.waiter}/cancel", {}, Authorization=f"Bearer {viewer_token}"
        )
        assert code == 403
        assert catalog.get_session(seeded.waiter).status == "waiting"


def test_an_operators_form_needs_its_csrf_token(sd_home: Path, tmp_path: Path) -> None:
    catalog = Catalog.open(f"sqlite:///{sd_home / 'swarmdeck.sqlite'}")
    seeded = seed_fleet(catalog, tmp_path)
    with running_portal(sd_home) as portal:
        operator = Client(portal.base)
        operator.get(f"/login?token={portal.one_time}")
        code, body = operator.post(f"/s/{seeded.waiter}/cancel", {"csrf": "forged"})
        assert code == 403 and "CSRF" in body
        assert catalog.get_session(seeded.waiter).status == "waiting"
        code, page = operator.get(f"/s/{seeded.waiter}")
        code, _ = operator.post(f"/s/{seeded.waiter}/cancel", {"csrf": csrf_of(page)})
        assert code == 303
        assert catalog.get_session(seeded.waiter).status == "cancelled"


def test_a_revoked_token_stops_working_at_the_next_request(sd_home: Path, tmp_path: Path) -> None:
    seed_fleet(Catalog.open(f"sqlite:///{sd_home / 'swarmdeck.sqlite'}"), tmp_path)
    secret = _token(sd_home, "temp", "operator")
    with running_portal(sd_home) as portal:
        browser = Client(portal.base)
        assert browser.get(f"/login?token={secret}")[0] == 200
        assert browser.get("/sessions")[0] == 200
        assert run_cli(sd_home, "portal", "token", "revoke", "temp").code == 0
        code, body = browser.get("/sessions")
        assert code == 401 and "revoked" in body
        missing = run_cli(sd_home, "portal", "token", "revoke", "temp")
        assert missing.code == 2 and "no portal token named 'temp'" in missing.stderr


def test_a_key_in_the_store_never_reaches_a_page_or_a_stream(
    store: Store, sd_home: Path, tmp_path: Path
) -> None:
    # Written without the redactor, as a transcript stored before the key was known.
    catalog = Catalog.open(store.url)
    seeded = seed_fleet(catalog, tmp_path)
    catalog.append_event(seeded.waiter, "leak", "user", {"text": f"the key is {KEY} ok"})
    catalog.set_status(seeded.waiter, "failed", error=f"boom {KEY}")
    assert run_cli(sd_home, "key", "set", "openai", stdin_text=KEY).code == 0
    with running_portal(sd_home) as portal:
        browser = Client(portal.base)
        browser.get(f"/login?token={portal.one_time}")
        for path in ("/", "/sessions", f"/s/{seeded.waiter}", f"/sessions?q={KEY[:12]}"):
            code, body = browser.get(path)
            assert code == 200 and KEY not in body, path
        code, page = browser.get(f"/s/{seeded.waiter}")
        assert "the key is [REDACTED] ok" in page
        stream = subprocess.run(
            [sys.executable, "-c", _READ_STREAM, f"{portal.base}/s/{seeded.waiter}/stream"],
            env={**cli_env(sd_home), "COOKIE": _cookie(browser)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "the key is [REDACTED] ok" in stream.stdout, stream.stderr
        assert KEY not in stream.stdout
    assert portal.proc.stderr is not None
    assert KEY not in portal.proc.stderr.read()  # nor its log


def test_binding_beyond_loopback_without_tls_warns(sd_home: Path) -> None:
    with running_portal(sd_home, "--host", "0.0.0.0") as portal:
        portal.proc.terminate()
        _, err = portal.proc.communicate(timeout=10)
    assert "without TLS" in err and "--behind-proxy" in err
    with running_portal(sd_home, "--host", "0.0.0.0", "--behind-proxy") as portal:
        portal.proc.terminate()
        _, err = portal.proc.communicate(timeout=10)
    assert "without TLS" not in err


def _cookie(client: Client) -> str:
    return "; ".join(f"{c.name}={c.value}" for c in client.jar)


# Reads a stream for two seconds with the browser's cookie, and prints what came.
_READ_STREAM = """
import os, sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Cookie": os.environ["COOKIE"]})
out = []
try:
    with urllib.request.urlopen(req, timeout=2) as resp:
        while True:
            line = resp.readline()
            if not line:
                break
            out.append(line.decode())
except Exception:
    pass
print("".join(out))
"""


def test_portal_without_its_extra_says_how_to_install_it(sd_home: Path) -> None:
    code = (
        "import sys, importlib.util as u\n"
        "real = u.find_spec\n"
        "u.find_spec = lambda name, *a: None if name == 'jinja2' else real(name, *a)\n"
        "from swarmdeck.cli.app import main\n"
        "sys.argv = ['swarmdeck', 'portal']\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=cli_env(sd_home),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert "pip install 'swarmdeck[portal]'" in proc.stderr and "Traceback" not in proc.stderr
