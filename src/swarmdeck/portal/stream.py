"""A session's live transcript as server-sent events: the entries stored after the page's
cursor, each an HTML fragment (a call comes again, whole, when its result lands), and the
inspector again whenever the session's status or usage moves. The store feed wakes the
stream; nothing here polls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.concurrency import run_in_threadpool

from swarmdeck.catalog.records import EventRecord
from swarmdeck.portal.access import Login
from swarmdeck.portal.facts import session_facts
from swarmdeck.portal.state import PortalState
from swarmdeck.views.transcript import Entry, Transcript

# A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_S = 15.0


def sse(event: str, data: str, event_id: int | None = None) -> str:
    """One server-sent event (a multi-line `data` becomes several data lines)."""
    head = f"event: {event}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return head + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n"


class TranscriptStream:
    """The events of one open page."""

    def __init__(self, state: PortalState, session_id: str, after: int, login: Login) -> None:
        self.state = state
        self.session_id = session_id
        self.after = after
        self.login = login
        self.transcript = Transcript()
        self._facts: tuple[object, ...] | None = None
        # What the inspector's context line is measured from (views.detail.context_summary):
        # every compaction and the last measured turn, not the whole transcript.
        self._measured: list[EventRecord] = []

    def _entries(self, entries: list[Entry]) -> str:
        page = self.state.renderer.page
        return "".join(
            sse("entry", page("_entry.html", entry=e), self.transcript.cursor) for e in entries
        )

    def _keep_measured(self, events: list[EventRecord]) -> None:
        for ev in events:
            if ev.kind == "assistant" and ev.payload.get("context"):
                self._measured = [e for e in self._measured if e.kind != "assistant"]
                self._measured.append(ev)
            elif ev.kind == "compaction":
                self._measured.append(ev)

    def _read(self, first: bool) -> str:
        """What is new since the last read, as events."""
        events = self.state.catalog.events(self.session_id, after_id=self.transcript.cursor)
        self._keep_measured(events)
        if first:  # what the page drew already builds the calls a later result folds into
            self.transcript.add([e for e in events if e.id <= self.after])
            events = [e for e in events if e.id > self.after]
        out = self._entries(self.transcript.add(events))
        detail, html = session_facts(self.state, self.session_id, self.login, self._measured)
        facts = (detail.record.status, detail.usage.turns, detail.record.updated_at)
        if facts != self._facts:
            self._facts = facts
            out += sse("inspector", html)
        return out

    async def events(self) -> AsyncIterator[str]:
        """The stream, until the page goes away."""
        feed = self.state.feed
        bell = feed.subscribe(self.session_id)
        try:
            yield "retry: 2000\n\n"
            first = True
            while True:
                bell.clear()
                # An ended session's stream stays open: it may be resumed.
                out = await run_in_threadpool(self._read, first)
                first = False
                if out:
                    yield out
                try:
                    await asyncio.wait_for(bell.wait(), KEEPALIVE_S)
                except TimeoutError:
                    yield ": keepalive\n\n"
        finally:
            feed.unsubscribe(self.session_id, bell)
