"""The catalog tables: sessions, events (the transcript), usage, artifacts, workers."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from swarmdeck.catalog.nul_text import escape_nul, unescape_nul

metadata = sa.MetaData()

# Each table is spelled out column by column, though several share a shape (an id, a name,
# a timestamp): each is its own contract with the stores already out there, and a builder
# shared by two would hide from migrations.py what a change to one adds.


class NulSafeText(sa.types.TypeDecorator[str]):
    """`Text` that escapes NUL on the way in and restores it on the way out."""

    impl = sa.Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: sa.Dialect) -> Any:
        return escape_nul(value) if isinstance(value, str) else value

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> Any:
        return unescape_nul(value) if isinstance(value, str) else value


sessions = sa.Table(
    "sd_sessions",
    metadata,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("parent_id", sa.String(64), index=True),
    sa.Column("root_id", sa.String(64), index=True),
    sa.Column("depth", sa.Integer, nullable=False, default=0),
    sa.Column("agent", sa.String(128)),
    sa.Column("model", sa.String(256), nullable=False),
    sa.Column("mode", sa.String(32), nullable=False),
    sa.Column("workdir", sa.Text, nullable=False),
    sa.Column("run_dir", sa.Text, nullable=False),
    sa.Column("status", sa.String(32), nullable=False, index=True),
    # Free text a model or a user wrote may hold any character (see nul_text).
    sa.Column("title", NulSafeText),
    sa.Column("task", NulSafeText, nullable=False),
    sa.Column("system_message", NulSafeText),
    sa.Column("tool_names", sa.Text),  # JSON list or null for "all of the mode's tools"
    sa.Column("options", sa.Text, nullable=False, default="{}"),  # JSON: budgets, step cap...
    sa.Column("result", sa.Text),  # JSON of the submitted result
    sa.Column("final_text", NulSafeText),
    sa.Column("error", NulSafeText),
    # Each generation is one workflow run of the session: resume and rollover start the
    # next one, so a long-lived session never replays an unbounded step log.
    sa.Column("generation", sa.Integer, nullable=False, default=0),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    # The executor (sd_workers) answerable for the session: it starts it (while pending) or
    # runs it. Null while pending: handed to the fleet, for any live worker to take.
    sa.Column("executor", sa.String(128), index=True),
    # Raised by every execution of the session's workflow as it starts (a takeover starts
    # one): a journaled write names the epoch it ran under and lands only while that is
    # still the session's, so a paused worker that comes back cannot commit a step.
    sa.Column("epoch", sa.Integer, nullable=False, default=0, server_default="0"),
    # When the session last showed it is working between transcript entries (a model
    # streaming a long answer), for whoever watches it for idleness from another process.
    sa.Column("active_at", sa.Float),
)

# The inbox lives in the catalog, not in engine messages: a message sent while no worker
# runs, or while the session rolls over to a new workflow, is kept until a worker drains
# it. The engine only rings a doorbell so a waiting session wakes at once.
inbox = sa.Table(
    "sd_inbox",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String(64), nullable=False, index=True),
    sa.Column("msg_id", sa.String(128), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("consumed_by", sa.String(128)),
    sa.UniqueConstraint("session_id", "msg_id", name="uq_sd_inbox_msg"),
)

events = sa.Table(
    "sd_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("session_id", sa.String(64), nullable=False),
    sa.Column("seq", sa.Integer, nullable=False),
    # A durable step may run twice (at-least-once); its events carry a key so the
    # second run's inserts are no-ops and the transcript never holds duplicates.
    sa.Column("key", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("ts", sa.Float, nullable=False),
    sa.UniqueConstraint("session_id", "key", name="uq_sd_events_key"),
    sa.UniqueConstraint("session_id", "seq", name="uq_sd_events_seq"),
)

usage = sa.Table(
    "sd_usage",
    metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("turn", sa.Integer, primary_key=True),
    sa.Column("provider", sa.String(64), nullable=False),
    sa.Column("model", sa.String(256), nullable=False),
    sa.Column("input", sa.Integer, nullable=False, default=0),
    sa.Column("output", sa.Integer, nullable=False, default=0),
    sa.Column("reasoning", sa.Integer, nullable=False, default=0),
    sa.Column("cache_read", sa.Integer, nullable=False, default=0),
    sa.Column("cache_write", sa.Integer, nullable=False, default=0),
    sa.Column("cost_usd", sa.Float),
    sa.Column("ts", sa.Float, nullable=False, index=True),
    # The provider reported no counts; these are estimates (models/estimate.py).
    sa.Column("estimated", sa.Boolean, nullable=False, server_default=sa.false()),
)

artifacts = sa.Table(
    "sd_artifacts",
    metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("size", sa.Integer, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("ts", sa.Float, nullable=False),
)

workers = sa.Table(
    "sd_workers",
    metadata,
    sa.Column("executor_id", sa.String(128), primary_key=True),
    sa.Column("hostname", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    # /proc start time guards against a recycled pid looking alive.
    sa.Column("pid_start", sa.String(32)),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),
    sa.Column("stopped", sa.Boolean, nullable=False, default=False),
    sa.Column("recovered_by", sa.String(128)),
    sa.Column("recovered_at", sa.Float),
    # `worker` (serves the fleet's queue) or `local` (a run, the SDK: runs its own sessions).
    sa.Column("role", sa.String(16), nullable=False, default="local", server_default="local"),
    # The sandbox its tools run in (bwrap, landlock, none) and why, recorded by a process
    # that serves the fleet's queue: a run handed to the fleet reports the worker's.
    sa.Column("sandbox", sa.String(16)),
    sa.Column("sandbox_reason", sa.Text),
)

# A `swarmdeck worker --processes N` supervisor: it keeps `processes` engine processes
# running and scales to the value found here, which others (the scale_workers tool) write.
supervisors = sa.Table(
    "sd_supervisors",
    metadata,
    sa.Column("supervisor_id", sa.String(128), primary_key=True),
    sa.Column("hostname", sa.String(255)),
    sa.Column("pid", sa.Integer),
    sa.Column("processes", sa.Integer, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),
    sa.Column("stopped", sa.Boolean, nullable=False, default=False, server_default=sa.false()),
)

# Side effects marked `once` record their start here; a rerun after a crash finds the
# mark and tells the model the call was interrupted instead of running it again.
tool_marks = sa.Table(
    "sd_tool_marks",
    metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("call_key", sa.String(200), primary_key=True),
    sa.Column("started_at", sa.Float, nullable=False),
)


# What each generation's workflow found when it started (options, turns done, whether the
# model rests), stored once: a rerun after a crash takes the path the first run took, even
# though the session has moved on since. It is the generation's first journaled step.
generations = sa.Table(
    "sd_generations",
    metadata,
    sa.Column("session_id", sa.String(64), primary_key=True),
    sa.Column("generation", sa.Integer, primary_key=True),
    sa.Column("start", sa.Text, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
)


# The system agents enabled on this store (`swarmdeck system start`): every worker keeps
# their sessions running. The model is the one the user named.
system_agents = sa.Table(
    "sd_system_agents",
    metadata,
    sa.Column("agent_id", sa.String(64), primary_key=True),
    sa.Column("model", sa.String(256), nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False, default=True),
    sa.Column("plugins", sa.Text, nullable=False, default="[]"),  # JSON list of folders
    sa.Column("restarted_at", sa.Float, nullable=False, default=0.0),
    sa.Column("updated_at", sa.Float, nullable=False),
)
