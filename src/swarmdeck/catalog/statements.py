"""The catalog's per-turn statements, built once.

Building a SQLAlchemy Core statement (and its cache key) costs more than running it: an
event append measured 0.45 ms, of which SQLite's own work was 0.06 ms. Statements built
once with bound parameters keep only the running.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.records import TERMINAL_STATUSES
from swarmdeck.catalog.schema import NulSafeText

_events, _sessions, _inbox = schema.events, schema.sessions, schema.inbox
_session = sa.bindparam("b_session", type_=sa.String)

# Writers of one session take turns, so each reads the seq its predecessor committed:
# PostgreSQL locks the session's row; SQLite emits no lock, and its first write statement
# takes the database's write lock instead.
LOCK_SESSION = sa.select(_sessions.c.id).where(_sessions.c.id == _session).with_for_update()

SESSION_BY_ID = sa.select(_sessions).where(_sessions.c.id == _session)

# A live session's new status (and error, when b_error is not null); an ended session
# keeps its end.
SET_LIVE_STATUS = (
    _sessions.update()
    .where(_sessions.c.id == _session, _sessions.c.status.not_in(TERMINAL_STATUSES))
    .values(
        status=sa.bindparam("b_status"),
        updated_at=sa.bindparam("b_ts"),
        error=sa.func.coalesce(sa.bindparam("b_error", type_=NulSafeText), _sessions.c.error),
    )
)

INSERT_GENERATION = schema.generations.insert()

GENERATION_START = sa.select(schema.generations.c.start).where(
    schema.generations.c.session_id == _session,
    schema.generations.c.generation == sa.bindparam("b_generation"),
)

# The session, with what its generation b_generation stored at its start (null: nothing).
SESSION_WITH_START = (
    sa.select(_sessions, schema.generations.c.start.label("generation_start"))
    .select_from(
        _sessions.outerjoin(
            schema.generations,
            sa.and_(
                schema.generations.c.session_id == _sessions.c.id,
                schema.generations.c.generation == sa.bindparam("b_generation"),
            ),
        )
    )
    .where(_sessions.c.id == _session)
)

_event_values = {
    "session_id": _session,
    "seq": sa.select(sa.func.coalesce(sa.func.max(_events.c.seq), 0) + 1)
    .where(_events.c.session_id == _session)
    .scalar_subquery(),
    "key": sa.bindparam("b_key", type_=sa.String),
    "kind": sa.bindparam("b_kind", type_=sa.String),
    "payload": sa.bindparam("b_payload", type_=sa.Text),
    "ts": sa.bindparam("b_ts", type_=sa.Float),
}
INSERT_EVENT = _events.insert().values(**_event_values)

# The session still runs under the writer's epoch (see fence.py).
_epoch_holds = sa.exists().where(
    _sessions.c.id == _session, _sessions.c.epoch == sa.bindparam("b_epoch", type_=sa.Integer)
)


def _fenced_insert(table: sa.Table, values: dict[str, sa.ColumnElement]) -> sa.Insert:
    """INSERT ... SELECT these values WHERE the epoch holds, returning the row's session:
    nothing returned when it does not (a rowcount is not reported for every driver)."""
    select = sa.select(*(v.label(k) for k, v in values.items())).where(_epoch_holds)
    return table.insert().from_select(list(values), select).returning(table.c.session_id)


INSERT_EVENT_FENCED = _fenced_insert(_events, _event_values)

_mark_values = {
    "session_id": _session,
    "call_key": sa.bindparam("b_key", type_=sa.String),
    "started_at": sa.bindparam("b_ts", type_=sa.Float),
}
INSERT_TOOL_MARK = schema.tool_marks.insert().values(**_mark_values)
INSERT_TOOL_MARK_FENCED = _fenced_insert(schema.tool_marks, _mark_values)

SESSION_EPOCH = sa.select(_sessions.c.epoch).where(_sessions.c.id == _session)

# A new execution of the session's workflow claims it: its executor, the next epoch.
CLAIM_RUN = (
    _sessions.update()
    .where(_sessions.c.id == _session)
    .values(
        executor=sa.bindparam("b_executor", type_=sa.String),
        epoch=_sessions.c.epoch + 1,
        updated_at=sa.bindparam("b_ts", type_=sa.Float),
    )
)

# The model turns in a session's transcript.
_TURNS_DONE = (
    sa.select(sa.func.count())
    .where(_events.c.session_id == _session, _events.c.kind == "assistant")
    .scalar_subquery()
    .label("turns_done")
)

# An execution of the session's workflow starts (see Catalog.open_run): claimed under a new
# epoch, `running` unless it has ended; returns the row as it is now, and `turns_done`. One
# statement: a status update, a claim, a read and a count were four, at the start of every
# session.
OPEN_RUN = (
    _sessions.update()
    .where(_sessions.c.id == _session)
    .values(
        status=sa.case(
            (_sessions.c.status.in_(TERMINAL_STATUSES), _sessions.c.status), else_="running"
        ),
        executor=sa.bindparam("b_executor", type_=sa.String),
        epoch=_sessions.c.epoch + 1,
        updated_at=sa.bindparam("b_ts", type_=sa.Float),
    )
    .returning(*_sessions.c, _TURNS_DONE)
)

INSERT_USAGE = schema.usage.insert()

# A session shows it is working (see sessions.active_at).
TOUCH_ACTIVE = (
    _sessions.update()
    .where(_sessions.c.id == _session)
    .values(active_at=sa.bindparam("b_ts", type_=sa.Float))
)

EVENTS_AFTER = (
    sa.select(_events)
    .where(_events.c.session_id == _session, _events.c.id > sa.bindparam("b_after"))
    .order_by(_events.c.seq)
)

EVENT_ID_BY_KEY = sa.select(_events.c.id).where(
    _events.c.session_id == _session, _events.c.key == sa.bindparam("b_key")
)

# A message waiting for the session (of these kinds), or taken under this claim by a
# consumer that may have crashed before recording it: whether a drain has anything to do.
_claimed = _inbox.c.consumed_by == sa.bindparam("b_claim")
_waiting = _inbox.c.consumed_by.is_(None)
PENDING_ANY = (
    sa.select(_inbox.c.id).where(_inbox.c.session_id == _session, _waiting | _claimed).limit(1)
)
COUNT_WAITING = sa.select(sa.func.count()).where(_inbox.c.session_id == _session, _waiting)


def _of_kinds(n: int) -> sa.ColumnElement[bool]:
    """The inbox kind is one of n bound values, b_kind0...: an `IN` of a list (an
    expanding parameter) is rendered anew at every execution, which cost more than the
    query (a session's turn asked it twice)."""
    return _inbox.c.kind.in_([sa.bindparam(f"b_kind{i}", type_=sa.String) for i in range(n)])


@functools.cache
def pending_of_kinds(n: int) -> sa.Select[tuple[int]]:
    """PENDING_ANY for messages of n kinds (see kind_params)."""
    where = sa.and_(_waiting, _of_kinds(n)) | _claimed
    return sa.select(_inbox.c.id).where(_inbox.c.session_id == _session, where).limit(1)


@functools.cache
def count_waiting_of_kinds(n: int) -> sa.Select[tuple[int]]:
    """COUNT_WAITING for messages of n kinds (see kind_params)."""
    return COUNT_WAITING.where(_of_kinds(n))


def kind_params(kinds: Sequence[str]) -> dict[str, str]:
    """The bound values of the statements of kinds."""
    return {f"b_kind{i}": kind for i, kind in enumerate(kinds)}


@functools.cache
def news_of_kinds(n: int | None) -> sa.Select[tuple[Any, ...]]:
    """EVENTS_AFTER and pending_of_kinds(n) (PENDING_ANY when n is None) in one statement:
    a row per new event, with `b_mail` (whether mail waits) on each; one row of nulls and
    `b_mail` when no event is new. Two statements were two round trips (and two parses)
    at every turn."""
    one = sa.select(sa.literal(1).label("one")).subquery("one")
    newer = sa.and_(_events.c.session_id == _session, _events.c.id > sa.bindparam("b_after"))
    pending = PENDING_ANY if n is None else pending_of_kinds(n)
    mail = pending.exists().label("b_mail")
    return (
        sa.select(mail, *_events.c)
        .select_from(one.outerjoin(_events, newer))
        .order_by(_events.c.seq)
    )


# A turn's usage row, bound as u_<column>: on PostgreSQL it rides in its entry's statement.
_usage_values = {c.name: sa.bindparam(f"u_{c.name}", type_=c.type) for c in schema.usage.c}
_USAGE_DEFAULTS = {c.name: c.default.arg for c in schema.usage.c if c.default is not None}


def usage_params(session_id: str, ts: float, usage_row: dict[str, Any]) -> dict[str, Any]:
    """The bound values of a usage row in append_with (columns a row leaves out get their
    defaults, as an INSERT of only its keys would)."""
    row = {"estimated": False, **_USAGE_DEFAULTS, **usage_row, "session_id": session_id, "ts": ts}
    return {f"u_{c.name}": row.get(c.name) for c in schema.usage.c}


@functools.cache
def append_with(fenced: bool, usage: bool, status: bool) -> sa.Insert:
    """PostgreSQL: a transcript entry (INSERT_EVENT, or its fenced form) with the turn's
    usage row and the live session's new status in the same statement, as data-modifying
    CTEs: one round trip where there were three. If the entry does not land (a lost race
    for its seq, an epoch moved on), the caller's rollback takes the others back too."""
    insert = INSERT_EVENT_FENCED if fenced else INSERT_EVENT
    ctes = []
    if usage:
        ctes.append(schema.usage.insert().values(**_usage_values).cte("usage_row"))
    if status:
        ctes.append(SET_LIVE_STATUS.cte("moved"))
    return insert.add_cte(*ctes)
