"""One session as the portal shows it: its detail (views.detail, as `sessions show` and
the TUI's inspector read it), its transcript entries and its inspector fragment."""

from __future__ import annotations

from swarmdeck.catalog.records import EventRecord
from swarmdeck.portal.access import Login
from swarmdeck.portal.state import PortalState
from swarmdeck.views.detail import SessionDetail, context_line, context_summary, session_detail
from swarmdeck.views.transcript import Entry, Transcript


def load_detail(state: PortalState, session_id: str, with_events: bool) -> SessionDetail:
    """The session read now, its prefix taken from the shared index."""
    row = state.index.row(session_id)
    return session_detail(
        state.catalog,
        state.registry,
        session_id,
        with_events=with_events,
        prefix=row.prefix if row else session_id,
    )


def inspector_html(state: PortalState, detail: SessionDetail, login: Login) -> str:
    """The inspector's facts and the actions this sign-in may take, as a fragment."""
    return state.renderer.page(
        "_inspector.html",
        d=detail,
        row=detail.row,
        usage=detail.usage,
        context=context_line(detail.context) if detail.context else None,
        login=login,
    )


def session_facts(
    state: PortalState, session_id: str, login: Login, events: list[EventRecord]
) -> tuple[SessionDetail, str]:
    """The session's detail (its context measured from `events`, the transcript a live
    page holds) and its inspector fragment."""
    detail = load_detail(state, session_id, with_events=False)
    detail.context = context_summary(events) if events else None
    return detail, inspector_html(state, detail, login)


def transcript_entries(detail: SessionDetail) -> tuple[list[Entry], int]:
    """The whole transcript as entries, and the cursor a live page follows from."""
    transcript = Transcript()
    transcript.add(detail.events)
    return transcript.entries, transcript.cursor
