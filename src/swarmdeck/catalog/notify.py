"""PostgreSQL LISTEN on a few channels in a thread: how a worker hears of a session handed
to the fleet, or of a message for one of its sessions, at once instead of at its next poll."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0
# How often the listener looks at its stop flag while no notification comes.
TICK_SECONDS = 0.5


def listen(store_url: str, channels: Mapping[str, Callable[[str], None]]) -> threading.Event:
    """Call each channel's callback (in a daemon thread) with the payload of each NOTIFY
    on it; set the returned event to stop. A lost connection is made again; meanwhile the
    caller's polls cover. Every callback is called once, with an empty payload, as it
    starts listening: what was announced before went unheard."""
    import psycopg

    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                with psycopg.connect(store_url, autocommit=True, connect_timeout=10) as conn:
                    for channel in channels:
                        conn.execute(f"LISTEN {channel}")
                    for on_notify in channels.values():
                        on_notify("")
                    while not stop.is_set():
                        for note in conn.notifies(timeout=TICK_SECONDS):
                            channels[note.channel](note.payload)
            except Exception as exc:  # the server went away: listen again shortly
                log.info("LISTEN %s: %s; listening again", ", ".join(channels), exc)
                stop.wait(RECONNECT_SECONDS)

    threading.Thread(target=run, name="sd-listen", daemon=True).start()
    return stop
