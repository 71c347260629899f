"""PostgreSQL LISTEN on one channel in a thread: how a worker hears of a session handed to
the fleet at once instead of at its next poll."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0
# How often the listener looks at its stop flag while no notification comes.
TICK_SECONDS = 0.5


def listen(store_url: str, channel: str, on_notify: Callable[[], None]) -> threading.Event:
    """Call `on_notify` (in a daemon thread) on each NOTIFY on `channel`; set the returned
    event to stop. A lost connection is made again; meanwhile the caller's polls cover."""
    import psycopg

    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                with psycopg.connect(store_url, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {channel}")
                    on_notify()  # whatever was announced before we listened
                    while not stop.is_set():
                        for _ in conn.notifies(timeout=TICK_SECONDS):
                            on_notify()
            except Exception as exc:  # the server went away: listen again shortly
                log.info("LISTEN %s: %s; listening again", channel, exc)
                stop.wait(RECONNECT_SECONDS)

    threading.Thread(target=run, name=f"sd-listen-{channel}", daemon=True).start()
    return stop
