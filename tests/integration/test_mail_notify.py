"""On PostgreSQL a worker hears of each message for a session at once (NOTIFY on the mail
channel at commit) instead of polling the inbox many times a second."""

from __future__ import annotations

import threading

import pytest

from swarmdeck.catalog.catalog import MAIL_CHANNEL, Catalog
from swarmdeck.catalog.notify import listen
from tests.conftest import Store

pytestmark = pytest.mark.postgres


def _heard_after(
    catalog: Catalog, store: Store, post: tuple[str, str, str], within: float = 5.0
) -> bool:
    """Whether the mail channel rang within `within` s of posting (session, msg id, kind)."""
    heard, listening = threading.Event(), threading.Event()

    def on_mail() -> None:
        # The listener rings once as it starts (what came before went unheard).
        if listening.is_set():
            heard.set()
        listening.set()

    stop = listen(store.url, {MAIL_CHANNEL: on_mail})
    try:
        assert listening.wait(10)
        catalog.post(*post, {"text": "hello"})
        return heard.wait(within)
    finally:
        stop.set()


@pytest.mark.parametrize("store", ["postgres"], indirect=True)
def test_a_message_rings_the_mail_channel_once_delivered(store: Store) -> None:
    catalog = Catalog.open(store.url)
    catalog.create_session(
        session_id="s1", model="fake:m", mode="explore", workdir="/w", run_dir="/r", task="t"
    )
    assert _heard_after(catalog, store, ("s1", "m1", "user"))
    assert _heard_after(catalog, store, ("s1", "m2", "answer"))
    # Nothing a worker would ring the session for: a duplicate (a client's retry), a
    # message of another kind.
    assert not _heard_after(catalog, store, ("s1", "m1", "user"), within=1.0)
    assert not _heard_after(catalog, store, ("s1", "m3", "notice"), within=1.0)
