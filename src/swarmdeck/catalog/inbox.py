"""Sessions' inboxes: messages delivered once, taken by one consumer step at a time."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from swarmdeck.catalog import post_statements, schema, statements
from swarmdeck.catalog.access import StoreAccess, lock_session, no_session, refuse_secret_id
from swarmdeck.catalog.records import (
    COMPACT_REQUEST_KIND,
    TERMINAL_STATUSES,
    Delivery,
    InboxItem,
    InboxPost,
)

# Messages from someone (a person, a sub-agent's answer, a person's request to compact): a
# worker rings their session.
RINGING_KINDS = ("user", "answer", COMPACT_REQUEST_KIND)
# Tries of a drain that lost the race for its entries' next seq (see append_event).
DRAIN_ATTEMPTS = 50


def _items(rows: Iterable[sa.Row[Any]]) -> list[InboxItem]:
    """Inbox rows as the messages they hold."""
    return [InboxItem(r.id, r.msg_id, r.kind, json.loads(r.payload)) for r in rows]


def _under_claim(inbox: sa.FromClause, session_id: str, claim: str) -> sa.ColumnElement[bool]:
    """The session's messages taken under `claim` (in the inbox table, or an alias of it)."""
    return sa.and_(inbox.c.session_id == session_id, inbox.c.consumed_by == claim)


def read_mail_note(note: str) -> tuple[int, str] | None:
    """(message id, session id) of a mail NOTIFY's payload ("<message id> <session id>",
    as post_statements writes it); None for any other."""
    message_id, _, session_id = note.partition(" ")
    if not message_id.isdigit() or not session_id:
        return None
    return int(message_id), session_id


class InboxTables(StoreAccess):
    """The inbox (sd_inbox)."""

    def post(self, session_id: str, msg_id: str, kind: str, payload: dict[str, Any]) -> bool:
        """Deliver a message; False when this msg_id was delivered before (a client retry)."""
        refuse_secret_id(self.redact, msg_id, "message id")
        with self.engine.begin() as conn:
            return self._post(conn, InboxPost(session_id, msg_id, kind, payload))

    def post_live(self, post: InboxPost) -> Delivery:
        """Deliver a message unless the session has ended, and say which (NotFoundError:
        no such session). On PostgreSQL one statement: the check, the insert and the
        NOTIFY that wakes the session's worker (see post_statements)."""
        refuse_secret_id(self.redact, post.msg_id, "message id")
        if self.is_sqlite:
            return self._post_live_sqlite(post)
        params = self._post_params(post)
        ring = post.kind in RINGING_KINDS
        sql = post_statements.POST_LIVE_NOTIFY if ring else post_statements.POST_LIVE
        with self.engine.begin() as conn:
            row = conn.execute(sql, params).first()
        if row is None:
            raise no_session(post.session_id)
        ended = row.status if row.status in TERMINAL_STATUSES else None
        return Delivery(row.id is not None, ended)

    def _post_params(self, post: InboxPost) -> dict[str, Any]:
        """The bound values of post_statements' inserts."""
        return {
            "b_session": post.session_id,
            "b_msg": post.msg_id,
            "b_kind": post.kind,
            "b_payload": self._json(post.payload),
            "b_ts": time.time(),
        }

    def _post_live_sqlite(self, post: InboxPost) -> Delivery:
        """post_live on SQLite: the session read first, outside the write, so that an ended
        session is answered as such even where the store cannot be written (a read-only
        home); there is no round trip to save."""
        with self.engine.begin() as conn:
            row = conn.execute(statements.SESSION_BY_ID, {"b_session": post.session_id}).first()
            if row is None:
                raise no_session(post.session_id)
            if row.status in TERMINAL_STATUSES:
                return Delivery(False, row.status)
            return Delivery(self._post(conn, post))

    def _post(self, conn: sa.Connection, post: InboxPost) -> bool:
        """Insert a message unless its msg_id is there: never an error, so it can share a
        transaction with other writes."""
        if not self.is_sqlite and post.kind in RINGING_KINDS:
            # The workers hear of it at commit, instead of each polling the inbox 20 times
            # a second (10 % of an idle worker's CPU went into those polls); its id and
            # session let the one that runs the session ring it without a read. The insert
            # and the NOTIFY are one statement.
            notify = post_statements.POST_NOTIFY
            return conn.execute(notify, self._post_params(post)).first() is not None
        insert = sqlite_insert if self.is_sqlite else postgresql_insert
        statement = (
            insert(schema.inbox)
            .values(
                session_id=post.session_id,
                msg_id=post.msg_id,
                kind=post.kind,
                payload=self._json(post.payload),
                created_at=time.time(),
            )
            .on_conflict_do_nothing(index_elements=["session_id", "msg_id"])
            .returning(schema.inbox.c.id)
        )
        return conn.execute(statement).first() is not None

    def drain(
        self,
        session_id: str,
        claim: str,
        kinds: Iterable[str] | None = None,
        status: str | None = None,
        record: Callable[[str], str] | None = None,
        look_first: bool = True,
        once: bool = False,
    ) -> list[InboxItem]:
        """Take the pending messages (of these kinds) for one consumer step, in order.

        A step rerun after a crash passes the same claim and gets the same items back.
        With `status`, a live session that took messages moves to it in the same
        transaction, so no observer sees the messages gone while the session still rests.
        With `record` (an inbox kind to its transcript kind), each message taken joins the
        transcript in that transaction too, under `inbox:<msg_id>`, once: one commit for
        the take and the entries, where there was one each.
        `look_first` False claims at once, without the read that spares an empty drain its
        write: for a drain that a ring says will find mail.
        `once`: the claim is the drain's only record (a session loop's drain of format 6),
        so messages already under it are its whole answer and none is added to them: the
        run that claimed them went on with those alone.
        """
        kinds = None if kinds is None else list(kinds)
        if look_first and not self._mail_waits(session_id, claim, kinds):
            return []  # most drains find nothing: a read, then, and no write lock taken
        attempt = 0
        while True:
            try:
                with self.engine.begin() as conn:
                    if attempt:  # lost a race for the transcript's next seq
                        lock_session(conn, session_id)
                    rows = self._take(conn, session_id, claim, kinds, record, once)
                    if rows and status is not None:
                        moved = self._status_params(session_id, status, None)
                        conn.execute(statements.SET_LIVE_STATUS, moved)
                return _items(rows)
            except IntegrityError:
                attempt += 1
                if attempt == DRAIN_ATTEMPTS:
                    raise

    def taken_under(self, session_id: str, claim: str) -> list[InboxItem]:
        """The messages a drain took under `claim`, in order (a read): what a replayed drain
        of format 6 returns, its first run having gone on with them."""
        inbox = schema.inbox
        under = sa.select(inbox).where(_under_claim(inbox, session_id, claim))
        with self._reads.connect() as conn:
            rows = conn.execute(under.order_by(inbox.c.id)).all()
        return _items(rows)

    def _mail_waits(self, session_id: str, claim: str, kinds: list[str] | None) -> bool:
        """True when messages (of these kinds) wait, or some were taken under `claim`."""
        check, params = statements.PENDING_ANY, {"b_session": session_id, "b_claim": claim}
        if kinds is not None:
            check = statements.pending_of_kinds(len(kinds))
            params.update(statements.kind_params(kinds))
        with self._reads.connect() as conn:
            return conn.execute(check, params).first() is not None

    def _take(
        self,
        conn: sa.Connection,
        session_id: str,
        claim: str,
        kinds: list[str] | None,
        record: Callable[[str], str] | None,
        once: bool = False,
    ) -> list[sa.Row[Any]]:
        """Claim the pending messages and read every one under the claim (a rerun's too);
        with `record`, put those not yet in the transcript there."""
        taken = self._claim(conn, session_id, claim, kinds, once)
        rows = [row for row, _ in taken]
        if record is None or not rows:
            return rows
        # Taken by an earlier run under this claim: recorded with it, unless a release
        # that recorded in a transaction of its own stopped in between.
        earlier = [f"inbox:{row.msg_id}" for row, new in taken if not new]
        stored = self._stored_keys(conn, session_id, earlier) if earlier else set()
        for row in rows:
            key = f"inbox:{row.msg_id}"
            if key not in stored:
                entry = {"b_session": session_id, "b_key": key, "b_kind": record(row.kind)}
                # Written as append_event writes it: redacted again (a key stored since).
                entry.update(b_payload=self._json(json.loads(row.payload)), b_ts=time.time())
                self._insert_event(conn, entry)
        return rows

    def _claim(
        self,
        conn: sa.Connection,
        session_id: str,
        claim: str,
        kinds: list[str] | None,
        once: bool = False,
    ) -> list[tuple[sa.Row[Any], bool]]:
        """Claim the pending messages (`once`: unless some are under the claim already);
        every message under the claim, in order, each with whether this call claimed it (a
        rerun finds its first run's claimed before)."""
        inbox = schema.inbox
        pending = sa.and_(inbox.c.session_id == session_id, inbox.c.consumed_by.is_(None))
        if kinds is not None:
            pending = sa.and_(pending, inbox.c.kind.in_(kinds))
        if once:
            under = schema.inbox.alias("under")
            taken = sa.select(under.c.id).where(_under_claim(under, session_id, claim))
            pending = sa.and_(pending, ~taken.exists())
        update = inbox.update().where(pending).values(consumed_by=claim)
        before = _under_claim(inbox, session_id, claim)
        if self.is_sqlite:  # no UPDATE inside a WITH: claim, then read under the claim
            new = {row.id for row in conn.execute(update.returning(inbox.c.id))}
            rows = conn.execute(sa.select(inbox).where(before).order_by(inbox.c.id)).all()
            return [(row, row.id in new) for row in rows]
        # One round trip. Every part of a statement reads one snapshot, so the SELECT sees
        # only what was under the claim before the UPDATE beside it claimed more.
        claimed = update.returning(*inbox.c).cte("claimed")
        earlier = sa.select(*inbox.c, sa.literal(False).label("new")).where(before)
        fresh = sa.select(*claimed.c, sa.literal(True).label("new"))
        rows = conn.execute(sa.union_all(earlier, fresh).order_by(sa.text("id"))).all()
        return [(row, row.new) for row in rows]

    def _stored_keys(self, conn: sa.Connection, session_id: str, keys: list[str]) -> set[str]:
        events = schema.events
        found = sa.select(events.c.key).where(
            events.c.session_id == session_id, events.c.key.in_(keys)
        )
        return set(conn.execute(found).scalars())

    def last_inbox_id(self) -> int:
        """The id of the newest message in any inbox (0 when none)."""
        with self._reads.connect() as conn:
            return conn.execute(sa.select(sa.func.max(schema.inbox.c.id))).scalar() or 0

    def mail_since(self, after_id: int, executor: str) -> tuple[int, list[tuple[int, str]]]:
        """Messages from someone (a user message, an answer) after a cursor, not yet taken,
        to sessions this executor runs, as (message id, session id); with the newest id of
        any inbox."""
        inbox, sessions = schema.inbox, schema.sessions
        with self._reads.connect() as conn:
            newest = conn.execute(sa.select(sa.func.max(inbox.c.id))).scalar() or 0
            rows = conn.execute(
                sa.select(inbox.c.id, inbox.c.session_id)
                .join(sessions, sessions.c.id == inbox.c.session_id)
                .where(
                    inbox.c.id > after_id,
                    inbox.c.consumed_by.is_(None),
                    inbox.c.kind.in_(RINGING_KINDS),
                    sessions.c.executor == executor,
                )
            ).all()
        return newest, [(r[0], r[1]) for r in rows]

    def has_message(self, session_id: str, msg_id: str) -> bool:
        """True when a message with this id was delivered to the session (taken or not)."""
        inbox = schema.inbox
        with self._reads.connect() as conn:
            row = conn.execute(
                sa.select(inbox.c.id).where(
                    inbox.c.session_id == session_id, inbox.c.msg_id == msg_id
                )
            ).first()
        return row is not None

    def delivered(self, session_id: str, msg_id_prefix: str = "") -> list[InboxItem]:
        """Every message delivered to the session (taken or not) whose id starts with the
        prefix, in order."""
        inbox = schema.inbox
        query = sa.select(inbox).where(inbox.c.session_id == session_id).order_by(inbox.c.id)
        if msg_id_prefix:
            query = query.where(inbox.c.msg_id.startswith(msg_id_prefix, autoescape=True))
        with self._reads.connect() as conn:
            rows = conn.execute(query).all()
        return _items(rows)

    def pending_count(self, session_id: str, kinds: Iterable[str] | None = None) -> int:
        """Messages (of these kinds) not yet taken by the session."""
        count, params = statements.COUNT_WAITING, {"b_session": session_id}
        if kinds is not None:
            kinds = list(kinds)
            count = statements.count_waiting_of_kinds(len(kinds))
            params.update(statements.kind_params(kinds))
        with self._reads.connect() as conn:
            return conn.execute(count, params).scalar_one()
