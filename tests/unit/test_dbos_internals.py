"""Every DBOS internal swarmdeck's engine relies on, in one place (dbos is pinned <4, and
these are not its public API): a DBOS upgrade that moves one fails here, with a message
naming the internal and the swarmdeck function to fix, rather than somewhere in a fleet test.

The shapes are checked by name and signature; where the meaning matters (the predicates of
DBOS's own requeue, which `reenqueue_all` must match) by behaviour on a real SQLite store.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOSClient

from swarmdeck.runtime.engine.workflow import APP_NAME, APP_VERSION, SESSIONS_QUEUE, reenqueue_all

ENGINE = "swarmdeck.runtime.engine"


@dataclasses.dataclass(frozen=True)
class Internal:
    """One DBOS name we use: where it lives, what we call on it, who depends on it."""

    module: str
    path: str  # dotted, from the module: "SystemDatabase.start_queued_workflows"
    fix: str  # the swarmdeck function to fix when it moves
    params: tuple[str, ...] = ()  # leading parameters we pass, in order (after self)
    keywords: tuple[str, ...] = ()  # keyword parameters we pass by name
    members: tuple[str, ...] = ()  # attributes of the object we read or call

    @property
    def label(self) -> str:
        return f"{self.module}.{self.path}"


INTERNALS = (
    Internal(
        "dbos._core",
        "execute_dequeued_workflow",
        "PromptClaims.claim_now",
        params=("dbos", "status", "owner_xid"),
    ),
    Internal(
        "dbos._core",
        "prepare_enqueued_workflow",
        "Engine._enqueue_all",
        params=("dbos", "func", "args", "kwargs"),
        keywords=("queue_name", "workflow_id"),
    ),
    Internal(
        "dbos._sys_db",
        "SystemDatabase.init_workflows",
        "Engine._enqueue_all",
        params=("statuses",),
    ),
    Internal("dbos._utils", "INTERNAL_QUEUE_NAME", "Engine.requeue_work_of"),
    Internal(
        "dbos._utils",
        "GlobalParams",
        "PromptClaims.claim_now",
        members=("executor_id", "app_version"),
    ),
    Internal("dbos._utils", "generate_uuid", "PromptClaims.claim_now"),
    # Looked up in dbos._dbos, where launch starts it: the fleet's queue is registered at
    # the head of its thread (a fallback keeps a worker working, but up to 1 s late).
    Internal("dbos._dbos", "queue_thread", "launch_serving", params=("stop_event", "dbos")),
    Internal("dbos._dbos", "_get_dbos_instance", "dbos_instance"),
    Internal(
        "dbos._dbos",
        "DBOS.destroy",
        "Engine.shutdown",
        keywords=("workflow_completion_timeout_sec",),
    ),
    Internal(
        "dbos._dbos",
        "DBOS.register_queue",
        "Engine.launch",
        params=("name",),
        keywords=(
            "worker_concurrency",
            "global_concurrency",
            "polling_interval_sec",
            "on_conflict",
        ),
    ),
    Internal(
        "dbos._sys_db",
        "SystemDatabase.start_queued_workflows",
        "PromptClaims._locked_claim",
        params=(
            "queue",
            "executor_id",
            "app_version",
            "queue_partition_key",
            "local_running_count",
        ),
        keywords=("owner_xid", "is_latest_version"),
    ),
    Internal(
        "dbos._sys_db",
        "SystemDatabase._is_latest_version",
        "PromptClaims._is_latest",
        params=("app_version",),
    ),
    Internal(
        "dbos._sys_db",
        "SystemDatabase.get_queue",
        "PromptClaims.claim_now and _read_queue",
        params=("name",),
    ),
    Internal(
        "dbos._sys_db",
        "SystemDatabase.get_workflow_statuses",
        "PromptClaims.claim_now",
        params=("workflow_ids",),
    ),
    Internal(
        "dbos._sys_db",
        "SystemDatabase.get_workflow_status",
        "PromptClaims.claim_now",
        params=("workflow_uuid",),
    ),
    Internal(
        "dbos._sys_db",
        "SystemDatabase.get_pending_workflows",
        "_pending_workflows (it repeats its predicates)",
        params=("executor_id", "app_version"),
    ),
    Internal(
        "dbos._sys_db",
        "SystemDatabase.reenqueue_for_recovery",
        "reenqueue_all (it does this for many workflows at once)",
        params=("workflow_id", "executor_ids", "recovery_queue_name"),
    ),
    Internal(
        "dbos._sys_db",
        "SystemDatabase._name_filter",
        "reenqueue_all",
        params=("col", "value"),
    ),
    Internal("dbos._sys_db", "SystemDatabase._now_ms_sql", "reenqueue_all"),
    Internal(
        "dbos._sys_db",
        "SystemDatabase._wf",
        "_poll_each",
        params=("table", "workflow_id"),
        keywords=("shard_key",),
    ),
    Internal("dbos._sys_db", "ThreadSafeEventDict.snapshot", "_poll_each"),
    Internal("dbos._sys_db", "ThreadSafeEventDict.get", "_sqlite_listener", params=("key",)),
    Internal(
        "dbos._sys_db",
        "SystemDatabase._waiter",
        "_sqlite_listener (the key a recv waits under)",
        params=("workflow_id", "name"),
    ),
    Internal(
        "dbos._sys_db_sqlite",
        "SQLiteSystemDatabase._notification_listener",
        "install_sqlite_listener",
    ),
    Internal(
        "dbos._core",
        "ActiveWorkflowById",
        "PromptClaims._running",
        members=("activeList", "count_for_queue"),
    ),
    Internal(
        "dbos._queue",
        "Queue",
        "PromptClaims.claim_now",
        members=("_has_partition_limits",),
    ),
)


def resolve(item: Internal) -> Any:
    """The object an internal names; AssertionError saying what moved and what to fix."""
    where = f"DBOS internal {item.label} moved or changed: fix {ENGINE}.{item.fix}"
    try:
        found: Any = importlib.import_module(item.module)
    except ImportError:
        raise AssertionError(f"{where} (no module {item.module})") from None
    for part in item.path.split("."):
        if not hasattr(found, part):
            raise AssertionError(f"{where} (no attribute {part!r})")
        found = getattr(found, part)
    for member in item.members:
        if not hasattr(found, member):
            raise AssertionError(f"{where} (it has no {member!r})")
    if item.params or item.keywords:
        names = [
            p.name
            for p in inspect.signature(found).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        # Unbound methods list self first; we pass what follows it.
        names = names[1:] if names[:1] == ["self"] else names
        if tuple(names[: len(item.params)]) != item.params:
            raise AssertionError(
                f"{where} (its leading parameters are {names[: len(item.params)]}, "
                f"we pass {list(item.params)})"
            )
        missing = [k for k in item.keywords if k not in names]
        if missing:
            raise AssertionError(f"{where} (no parameter {', '.join(missing)})")
    return found


@pytest.mark.parametrize("item", INTERNALS, ids=lambda i: i.label)
def test_each_dbos_internal_we_use_is_where_we_expect_it(item: Internal) -> None:
    resolve(item)


def _wrong_forms(item: Internal) -> Iterator[Internal]:
    """The internal as a DBOS upgrade might change it: moved, renamed, re-signed."""
    yield dataclasses.replace(item, module=item.module + "_moved")
    head, _, tail = item.path.rpartition(".")
    yield dataclasses.replace(item, path=f"{head}.{tail}_renamed".lstrip("."))
    if item.members:
        yield dataclasses.replace(item, members=(*item.members, "gone_member"))
    if item.params:
        yield dataclasses.replace(item, params=(*item.params[:-1], "reordered"))
    if item.params or item.keywords:
        yield dataclasses.replace(item, keywords=(*item.keywords, "gone_keyword"))


@pytest.mark.parametrize("item", INTERNALS, ids=lambda i: i.label)
def test_a_changed_internal_fails_naming_it_and_the_function_to_fix(item: Internal) -> None:
    # The check above is only worth having if it fails on every way the name can move.
    for wrong in _wrong_forms(item):
        with pytest.raises(AssertionError) as failed:
            resolve(wrong)
        assert wrong.label in str(failed.value) and item.fix in str(failed.value)


def test_the_instances_carry_the_attributes_the_engine_reads(tmp_path: Path) -> None:
    # _sqlite_listener, reenqueue_all and PromptClaims read these off a live system
    # database: a rename fails here rather than in a silent poller thread.
    client = DBOSClient(
        system_database_url=f"sqlite:///{tmp_path / 'sys.sqlite'}",
        application_name=APP_NAME,
        lazy=True,
    )
    try:
        sys_db = client._sys_db
        where = f"fix {ENGINE}.sqlite_listener / reenqueue_all / PromptClaims"
        for name in (
            "engine",
            "app_name",
            "sharded",
            "notifications_map",
            "workflow_events_map",
            "streams_map",
            "_notification_listener_polling_interval_sec",
            "_run_background_processes",
        ):
            assert hasattr(sys_db, name), f"DBOS's system database has no {name!r}: {where}"
        for map_name in ("notifications_map", "workflow_events_map", "streams_map"):
            assert callable(getattr(getattr(sys_db, map_name), "snapshot", None)), map_name
        tables = sys_db.tables
        for table, columns in {
            "notifications": ("destination_uuid", "topic", "consumed", "created_at_epoch_ms"),
            "workflow_events": ("key",),
            "streams": ("key",),
            "workflow_status": (
                "status",
                "executor_id",
                "application_version",
                "application_name",
                "owner_xid",
                "started_at_epoch_ms",
                "updated_at",
                "queue_name",
            ),
        }.items():
            assert hasattr(tables, table), f"DBOS has no system table {table}: {where}"
            absent = set(columns) - set(getattr(tables, table).c.keys())
            assert not absent, f"DBOS's {table} lacks {sorted(absent)}: {where}"
    finally:
        client.destroy()


def test_the_dbos_instance_keeps_its_active_workflows_where_the_engine_reads_them() -> None:
    # Set in DBOS.__init__ (no instance without a launch here): PromptClaims._running.
    source = inspect.getsource(importlib.import_module("dbos._dbos").DBOS.__init__)
    assert "self._active_workflows_set" in source, f"fix {ENGINE}.PromptClaims._running"
    assert "self._sys_db_field" in source, f"fix {ENGINE}.PromptClaims (dbos._sys_db)"


# -- the predicates of DBOS's own requeue, by behaviour -----------------------------------

DEAD = ("dead-1", "dead-2")
EXECUTORS = (*DEAD, "live")
STATUSES = ("PENDING", "ENQUEUED", "SUCCESS")
VERSIONS = (APP_VERSION, "other-version")
NAMES = (APP_NAME, "other-app", None)
QUEUES = (SESSIONS_QUEUE, None)


def _seed(tmp_path: Path, name: str) -> DBOSClient:
    """A system database holding one workflow for each combination of the columns the
    requeue filters on."""
    client = DBOSClient(
        system_database_url=f"sqlite:///{tmp_path / name}", application_name=APP_NAME
    )
    sys_db = client._sys_db
    sys_db.run_migrations()
    rows = [
        {
            "workflow_uuid": f"wf-{n}",
            "status": status,
            "executor_id": executor,
            "application_version": version,
            "application_name": app,
            "queue_name": queue,
            "owner_xid": "token",
            "started_at_epoch_ms": 1,
            "created_at": 1,
            "updated_at": 1,
            "priority": 0,
        }
        for n, (status, executor, version, app, queue) in enumerate(
            itertools.product(STATUSES, EXECUTORS, VERSIONS, NAMES, QUEUES)
        )
    ]
    with sys_db.engine.begin() as conn:
        conn.execute(sys_db.tables.workflow_status.insert(), rows)
    return client


def _state(client: DBOSClient) -> dict[str, tuple[Any, ...]]:
    ws = client._sys_db.tables.workflow_status
    cols = (ws.c.status, ws.c.queue_name, ws.c.owner_xid, ws.c.started_at_epoch_ms)
    with client._sys_db.engine.connect() as conn:
        rows = conn.execute(sa.select(ws.c.workflow_uuid, *cols))
        return {r[0]: tuple(r[1:]) for r in rows}


def _dbos_requeue(sys_db: Any, executors: list[str], queue: str) -> int:
    """What DBOS's recover_pending_workflows does, workflow by workflow."""
    moved = 0
    for executor in executors:
        for pending in sys_db.get_pending_workflows(executor, APP_VERSION):
            moved += sys_db.reenqueue_for_recovery(pending.workflow_id, executors, queue)
    return moved


def testreenqueue_all_moves_exactly_what_dbos_own_requeue_moves(tmp_path: Path) -> None:
    theirs, mine = _seed(tmp_path, "theirs.sqlite"), _seed(tmp_path, "mine.sqlite")
    try:
        before = _state(mine)
        moved_by_dbos = _dbos_requeue(theirs._sys_db, list(DEAD), SESSIONS_QUEUE)
        moved_by_us = reenqueue_all(mine._sys_db, list(DEAD), SESSIONS_QUEUE)
        assert moved_by_dbos > 0 and moved_by_us == moved_by_dbos
        after = _state(mine)
        changed = {wf for wf in after if after[wf] != before[wf]}
        assert after == _state(theirs), (
            f"reenqueue_all no longer matches DBOS's reenqueue_for_recovery: fix "
            f"{ENGINE}.reenqueue_all (it changed {sorted(changed)})"
        )
        # A second call moves nothing, as DBOS's does not.
        assert reenqueue_all(mine._sys_db, list(DEAD), SESSIONS_QUEUE) == 0
    finally:
        theirs.destroy()
        mine.destroy()
