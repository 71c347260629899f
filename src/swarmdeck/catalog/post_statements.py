"""A message that rings its session, on PostgreSQL, in one statement, built once.

A person's message for a live session: the sender used to read the session (had it
ended?), insert the message, then NOTIFY the workers: three statements, each a round trip.
One statement now inserts the message unless the session has ended, says what the
session's status was, and NOTIFYs. Any other ringing message (a sub-agent's answer, one
session's message to another) is inserted and NOTIFYd in one statement too.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import Insert
from sqlalchemy.dialects.postgresql import insert as postgresql_insert

from swarmdeck.catalog import schema
from swarmdeck.catalog.direct import MAIL_CHANNEL
from swarmdeck.catalog.records import TERMINAL_STATUSES

_inbox, _sessions = schema.inbox, schema.sessions
_session = sa.bindparam("b_session", type_=sa.String)
_COLUMNS = ["session_id", "msg_id", "kind", "payload", "created_at"]
_VALUES = [
    _session,
    sa.bindparam("b_msg", type_=sa.String),
    sa.bindparam("b_kind", type_=sa.String),
    sa.bindparam("b_payload", type_=sa.Text),
    sa.bindparam("b_ts", type_=sa.Float),
]


def _post_live(notify: bool) -> sa.Select:
    """One row (none: no such session) with the session's status and the id
    of the message inserted (null: it had ended, or the msg_id was delivered before);
    with `notify`, a NOTIFY on the mail channel names the message and its session."""
    live = sa.select(_sessions.c.status).where(_sessions.c.id == _session).cte("live")
    unless_ended = live.c.status.not_in(TERMINAL_STATUSES)
    posted = _posted(
        postgresql_insert(_inbox).from_select(
            _COLUMNS, sa.select(*_VALUES).select_from(live).where(unless_ended)
        )
    )
    columns: list[sa.ColumnElement] = [live.c.status, posted.c.id]
    if notify:
        ring = sa.func.pg_notify(MAIL_CHANNEL, _note(posted.c.id))
        columns.append(sa.case((posted.c.id.is_not(None), ring)).label("rung"))
    return sa.select(*columns).select_from(live.outerjoin(posted, sa.true()))


def _post_notify() -> sa.Select:
    """The id of the message inserted and the NOTIFY that names it and its session; no row
    when the msg_id was delivered before (and no NOTIFY)."""
    posted = _posted(postgresql_insert(_inbox).values(dict(zip(_COLUMNS, _VALUES, strict=True))))
    ring = sa.func.pg_notify(MAIL_CHANNEL, _note(posted.c.id))
    return sa.select(posted.c.id, ring.label("rung")).select_from(posted)


def _posted(insert: Insert) -> sa.CTE:
    """The insert as the CTE "posted", with the id of the message it stored (none when the
    msg_id was delivered before: a client's retry)."""
    unique = ["session_id", "msg_id"]
    return insert.on_conflict_do_nothing(index_elements=unique).returning(_inbox.c.id).cte("posted")


def _note(message_id: sa.ColumnElement) -> sa.ColumnElement[str]:
    """The workers' note (inbox.read_mail_note reads it): "<message id> <session id>"."""
    return sa.cast(message_id, sa.String) + " " + _session


POST_LIVE = _post_live(notify=False)
POST_LIVE_NOTIFY = _post_live(notify=True)
POST_NOTIFY = _post_notify()
