"""A worker rings the sessions that got mail: those a mail NOTIFY names and that run in
this process at once, with no read of the inbox; the others (run here under a generation
this process has not seen, say) at its next look at the inbox, for which it reads the
store only every NOTIFIED_INBOX_SECONDS where NOTIFY tells it of each message."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.runtime import duties
from swarmdeck.runtime.duties import FleetDuties


def mail_note(message_id: int, session_id: str) -> str:
    """A mail NOTIFY's payload as PostgreSQL sends it (catalog/post_statements._note)."""
    return f"{message_id} {session_id}"


class Worker:
    """The engine as FleetDuties sees it: which sessions run here, and the rings made."""

    executor_id = "worker-1"

    def __init__(self, catalog: Catalog, here: set[str]) -> None:
        self.services = SimpleNamespace(catalog=catalog)
        self.here = here
        self.rung_here: list[str] = []
        self.rung: list[str] = []

    async def ring_if_here(self, session_id: str) -> bool:
        if session_id not in self.here:
            return False
        self.rung_here.append(session_id)
        return True

    async def ring(self, session_id: str) -> None:
        self.rung.append(session_id)


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    catalog = Catalog.open(f"sqlite:///{tmp_path / 'store.sqlite'}")
    for sid in ("s-here", "s-unseen"):
        catalog.create_session(
            session_id=sid, model="fake:m", mode="explore", workdir="/w", run_dir="/r", task="t"
        )
        catalog.update_session(sid, executor=Worker.executor_id)
    return catalog


async def test_a_session_named_by_notify_is_rung_without_a_read(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Worker(catalog, here={"s-here"})
    fleet = FleetDuties(worker, lambda _line: None, notified=True)  # type: ignore[arg-type]
    reads: list[int] = []
    reading = catalog.mail_since
    monkeypatch.setattr(catalog, "mail_since", lambda *a: reads.append(1) or reading(*a))
    await fleet.ring_mail()  # its first look at the inbox: nothing there yet
    assert len(reads) == 1
    catalog.post("s-here", "m1", "user", {"text": "hello"})
    message = catalog.delivered("s-here")[0].id
    fleet.hear_mail(mail_note(message, "s-here"))
    await fleet.ring_mail()
    assert (worker.rung_here, worker.rung, len(reads)) == (["s-here"], [], 1)
    # The next look at the inbox finds it rung already.
    fleet._looked = time.monotonic() - duties.NOTIFIED_INBOX_SECONDS
    await fleet.ring_mail()
    assert (worker.rung_here, worker.rung, len(reads)) == (["s-here"], [], 2)


async def test_a_session_named_by_notify_that_does_not_run_here_is_left_to_the_look(
    catalog: Catalog,
) -> None:
    worker = Worker(catalog, here=set())
    fleet = FleetDuties(worker, lambda _line: None, notified=True)  # type: ignore[arg-type]
    await fleet.ring_mail()
    catalog.post("s-unseen", "m1", "user", {"text": "hello"})
    fleet.hear_mail(mail_note(catalog.delivered("s-unseen")[0].id, "s-unseen"))
    await fleet.ring_mail()
    assert (worker.rung_here, worker.rung) == ([], [])  # not before the look is due
    fleet._looked = time.monotonic() - duties.NOTIFIED_INBOX_SECONDS
    await fleet.ring_mail()
    assert (worker.rung_here, worker.rung) == ([], ["s-unseen"])


async def test_a_listener_that_starts_again_makes_the_next_ring_look(catalog: Catalog) -> None:
    worker = Worker(catalog, here=set())
    fleet = FleetDuties(worker, lambda _line: None, notified=True)  # type: ignore[arg-type]
    await fleet.ring_mail()
    catalog.post("s-unseen", "m1", "user", {"text": "hello"})
    fleet.hear_mail("")  # LISTEN again after a lost connection: what came went unheard
    await fleet.ring_mail()
    assert worker.rung == ["s-unseen"]
