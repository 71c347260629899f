"""Cancel from the TUI, against a real worker: the confirmation names the sub-agent that
goes too, the cancel runs in the TUI's process (no `swarmdeck` process is started, no
engine launched) and stops the workflows of the session and its sub-agent on the worker."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from swarmdeck.runtime.host import Host, SessionRequest
from swarmdeck.ui.dialogs import ConfirmDialog
from tests.conftest import write_provider
from tests.integration.test_fleet_support import Fleet
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    open_catalog,
    status_is,
    wait_for,
)
from tests.ui.pilot_support import Tui, deck, notices, until

pytestmark = pytest.mark.fleet


def workflow_statuses(catalog, ids: list[str]) -> set[str]:
    """DBOS's status of these sessions' first workflows."""
    with catalog.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT status FROM workflow_status WHERE workflow_uuid IN :ids").bindparams(
                sa.bindparam("ids", expanding=True)
            ),
            {"ids": ids},
        )
        return {r.status for r in rows}


async def test_cancel_from_the_tui_stops_the_session_and_its_sub_agent(
    sd_home: Path, workdir: Path, fake_llm, monkeypatch: pytest.MonkeyPatch, tui: Tui
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    fake_llm.set_script(
        Scripted(
            {
                "ask the user": Agent([calls(call("ask_user", question="Which branch?"))]),
                "coordinate": Agent(
                    [
                        calls(call("spawn_agent", task="ask the user", title="asker")),
                        calls(call("wait_for_agents", timeout=600)),
                    ]
                ),
            }
        )
    )
    fleet = Fleet(sd_home)
    try:
        fleet.start("cancel-host")
        root = (
            Host()
            .create_session(
                SessionRequest("coordinate the release", "fake", workdir, title="coordinator"),
                fleet=True,
            )
            .id
        )
        catalog = open_catalog()
        child = wait_for(
            lambda: next(iter(catalog.descendant_ids(root)), None), timeout=60, what="the child"
        )
        wait_for(status_is(catalog, child, "input_required"), timeout=60, what="the question")
        assert workflow_statuses(catalog, [root, child]) == {"PENDING"}
        app = deck(catalog, pinned=False)
        async with tui(app) as pilot:
            app.session_list.select(root)
            await until(pilot, "the root followed", lambda: app.followed.session_id == root)
            await pilot.press("c")
            assert isinstance(app.screen, ConfirmDialog)
            asked = app.screen.message.plain
            assert root in asked and child in asked and "1 sub-agent(s) go too" in asked

            def no_process(*args: object, **kwargs: object) -> None:
                raise AssertionError(f"the cancel started a process: {args}")

            # The cancel is a call in this process: no `swarmdeck sessions cancel`.
            monkeypatch.setattr(subprocess, "run", no_process)
            monkeypatch.setattr(subprocess, "Popen", no_process)
            began = time.monotonic()
            await pilot.press("y")
            await until(
                pilot,
                "the tree cancelled",
                lambda: {catalog.get_session(i).status for i in (root, child)} == {"cancelled"},
                timeout=30,
            )
            took = time.monotonic() - began
            await until(
                pilot,
                "the result shown",
                lambda: any(n.startswith("cancelled 2 session(s)") for n in notices(app)),
            )
            monkeypatch.undo()
            [said] = [n for n in notices(app) if n.startswith("cancelled 2 session(s)")]
            assert root in said and child in said
            assert app.actions.host.engine is None  # no engine started in the TUI
        # The worker's workflows stopped.
        wait_for(
            lambda: workflow_statuses(catalog, [root, child]) == {"CANCELLED"},
            timeout=30,
            what="the workflows to stop",
        )
        print(f"cancel from the TUI took {took:.2f} s")
    finally:
        fleet.close()
