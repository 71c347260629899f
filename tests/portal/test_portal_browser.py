"""The portal in a real browser (headless Chromium) against a real `swarmdeck portal` on a
real store: what a newcomer does after `make demo`, a transcript that follows a running
session, a viewer who cannot cancel, and an artifact that downloads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from swarmdeck.catalog.catalog import Catalog
from tests.conftest import Store, run_cli
from tests.portal.browser import browser_page, shot
from tests.portal.portal_support import running_portal
from tests.ui.seed import seed_fleet

__all__ = ["browser_page"]  # the fixture


def test_after_the_demo_the_portal_shows_its_tree_and_answers_its_question(
    sd_home: Path, browser_page: object
) -> None:
    page = browser_page
    assert run_cli(sd_home, "demo", timeout=180).code == 0
    catalog = Catalog.open(f"sqlite:///{sd_home / 'swarmdeck.sqlite'}")
    with running_portal(sd_home) as portal:
        page.goto(portal.sign_in_url)  # type: ignore[attr-defined]
        assert page.locator("h1").inner_text() == "Fleet"  # type: ignore[attr-defined]
        shot(page, "fleet")
        page.click("header nav >> text=Sessions")  # type: ignore[attr-defined]
        page.wait_for_selector("table.tree tbody tr[data-id]")  # type: ignore[attr-defined]
        rows = page.locator("table.tree tbody tr")  # type: ignore[attr-defined]
        titles = rows.locator("td:first-child a").all_inner_texts()
        demo = [t for t in titles if "swarmdeck demo" in t]
        assert len(demo) == 1
        # The coordinator and its three reviewers, all completed, the three under it.
        coordinator = rows.filter(has_text="swarmdeck demo")
        coordinator_id = coordinator.get_attribute("data-id")
        children = [
            r
            for r in rows.all()
            if (r.get_attribute("data-id") or "").startswith(f"{coordinator_id}.")
        ]
        assert len(children) == 3
        assert all(
            r.locator(".status").inner_text() == "completed" for r in [coordinator, *children]
        )
        shot(page, "sessions")
        # Its artifact downloads.
        page.goto(f"{portal.base}/s/{coordinator_id}")  # type: ignore[attr-defined]
        assert "spawn_agent(" in page.locator("#transcript").inner_text()  # type: ignore[attr-defined]
        with page.expect_download() as download:  # type: ignore[attr-defined]
            page.click("text=review-report.md")  # type: ignore[attr-defined]
        saved = Path(download.value.path())
        assert saved.read_text().startswith("# Review of calc")
        assert download.value.suggested_filename == "review-report.md"
        shot(page, "session")
        # The question that waits for the person: answered from the page.
        page.goto(f"{portal.base}/sessions?needs=1")  # type: ignore[attr-defined]
        page.click("text=a question for you")  # type: ignore[attr-defined]
        assert (
            "Which branch should the release notes cover?" in page.locator("#question").inner_text()
        )  # type: ignore[attr-defined]
        shot(page, "needs-you")
        page.fill("#answer-text", "main")  # type: ignore[attr-defined]
        page.click("form.answer button")  # type: ignore[attr-defined]
        assert "answer delivered" in page.locator("#said").inner_text()  # type: ignore[attr-defined]
        # The demo's process has ended: the portal resumes the session in a process of its
        # own; the page follows it live to its end.
        page.wait_for_selector("#status.st-completed", timeout=120_000)  # type: ignore[attr-defined]
        page.wait_for_selector("text=Noted: the user answered: main.")  # type: ignore[attr-defined]
        waiting = catalog.list_sessions(limit=10)
        done = next(s for s in waiting if s.title == "a question for you")
        assert done.status == "completed", done.error
        shot(page, "answered")


def test_a_transcript_follows_a_running_session_without_a_reload(
    store: Store, sd_home: Path, tmp_path: Path, browser_page: object
) -> None:
    page = browser_page
    catalog = Catalog.open(store.url)
    seeded = seed_fleet(catalog, tmp_path)
    catalog.set_status(seeded.waiter, "running")
    with running_portal(sd_home) as portal:
        page.goto(portal.sign_in_url)  # type: ignore[attr-defined]
        page.goto(f"{portal.base}/s/{seeded.waiter}")  # type: ignore[attr-defined]
        page.wait_for_selector("#live.on")  # type: ignore[attr-defined]
        page.evaluate("window.__same_page = true")  # type: ignore[attr-defined]
        # Another process runs the session: a model turn with a tool call, then its result.
        _in_another_process(
            store.url,
            f"""
            catalog.append_event({seeded.waiter!r}, "t9", "assistant", {{
                "text": "checking the build", "tool_calls": [
                    {{"id": "c9", "name": "read_file", "arguments": '{{"path": "CI.md"}}'}}]}})
            """,
        )
        page.wait_for_selector("text=checking the build")  # type: ignore[attr-defined]
        call = page.locator("li.kind-call.open", has_text="read_file")  # type: ignore[attr-defined]
        assert call.count() == 1
        _in_another_process(
            store.url,
            f"""
            catalog.append_event({seeded.waiter!r}, "r9", "tool_result", {{
                "call_id": "c9", "content": "the build is green"}})
            catalog.set_status({seeded.waiter!r}, "completed")
            """,
        )
        # The call's own element takes its result; the inspector follows the status.
        page.wait_for_selector("li.kind-call:not(.open) >> text=the build is green")  # type: ignore[attr-defined]
        assert page.locator("li", has_text="read_file").count() == 1  # type: ignore[attr-defined]
        page.wait_for_selector("#status.st-completed")  # type: ignore[attr-defined]
        assert page.evaluate("window.__same_page") is True  # type: ignore[attr-defined]
        shot(page, "live")


def test_a_viewer_sees_no_cancel_and_the_server_refuses_one(
    sd_home: Path, tmp_path: Path, browser_page: object
) -> None:
    page = browser_page
    catalog = Catalog.open(f"sqlite:///{sd_home / 'swarmdeck.sqlite'}")
    seeded = seed_fleet(catalog, tmp_path)
    token = run_cli(sd_home, "portal", "token", "add", "guest", "--role", "viewer").stdout.strip()
    with running_portal(sd_home) as portal:
        page.goto(f"{portal.base}/login")  # type: ignore[attr-defined]
        page.fill("#token", token)  # type: ignore[attr-defined]
        page.click("form.login button")  # type: ignore[attr-defined]
        page.wait_for_selector("text=Fleet")  # type: ignore[attr-defined]
        page.goto(f"{portal.base}/s/{seeded.waiter}")  # type: ignore[attr-defined]
        assert page.locator("form.cancel").count() == 0  # type: ignore[attr-defined]
        assert "you can look, not act" in page.inner_text("#inspector")  # type: ignore[attr-defined]
        # A forged cancel from the signed-in browser (its cookie rides along).
        answer = page.request.post(  # type: ignore[attr-defined]
            f"{portal.base}/s/{seeded.waiter}/cancel", form={"csrf": "whatever"}
        )
        assert answer.status == 403 and "viewer" in answer.text()
        assert catalog.get_session(seeded.waiter).status == "waiting"
        shot(page, "viewer")


def _in_another_process(store_url: str, code: str) -> None:
    script = "from swarmdeck.catalog.catalog import Catalog\n"
    script += f"catalog = Catalog.open({store_url!r})\n" + textwrap.dedent(code)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
