"""The fleet queue's claims ask DBOS whether this worker runs the latest version at most
once per LATEST_VERSION_TTL_S, and pass its answer to every claim in between."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from swarmdeck.runtime.engine import claims
from swarmdeck.runtime.engine.claims import PromptClaims
from swarmdeck.runtime.engine.workflow import SESSIONS_QUEUE
from tests.manual_clock import ManualClock, install


@dataclass
class Queue:
    name: str


@dataclass
class SysDb:
    """The calls of DBOS's system database a claim makes, recorded (and the queue's row,
    which the claims read through a cache of their own)."""

    latest: bool = True
    sharded: bool = False
    asked: list[str] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)

    def start_queued_workflows(
        self, queue: Queue, executor_id: str, app_version: str, *args: Any, **kwargs: Any
    ) -> tuple[list[str], None]:
        self.claims.append({"queue": queue.name, "app_version": app_version, **kwargs})
        return [], None

    def _is_latest_version(self, app_version: str) -> bool:
        self.asked.append(app_version)
        return self.latest

    def get_queue(self, name: str) -> Queue:
        return Queue(name)


class Active:
    def activeList(self) -> list[str]:  # DBOS names it so
        return []

    def count_for_queue(self, queue_name: str) -> int:
        return 0


@dataclass
class Dbos:
    _sys_db: SysDb
    _active_workflows_set: Active = field(default_factory=Active)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    # Something waits on the queue (the look for it reads the store, which is not here).
    monkeypatch.setattr(PromptClaims, "_any_waiting", lambda self: True)
    return install(monkeypatch, claims)


def claim(sys_db: SysDb, queue: str = SESSIONS_QUEUE, version: str = "v1", **kw: Any) -> None:
    sys_db.start_queued_workflows(Queue(queue), "exec-1", version, None, 0, **kw)


def test_the_latest_version_is_asked_once_per_ttl(clock: ManualClock) -> None:
    sys_db = SysDb()
    PromptClaims(Dbos(sys_db))
    for _ in range(20):
        claim(sys_db)
        clock.now += 0.05  # DBOS's queue thread, every 50 ms: 1 s of claims
    assert sys_db.asked == ["v1"]
    assert [c["is_latest_version"] for c in sys_db.claims] == [True] * 20
    # A new version registered elsewhere: seen once the answer is older than the TTL.
    sys_db.latest = False
    clock.now += PromptClaims.LATEST_VERSION_TTL_S
    claim(sys_db)
    assert sys_db.asked == ["v1", "v1"] and sys_db.claims[-1]["is_latest_version"] is False


def test_a_caller_answer_or_another_version_or_queue_is_respected(clock: ManualClock) -> None:
    sys_db = SysDb()
    PromptClaims(Dbos(sys_db))
    claim(sys_db, is_latest_version=False)  # DBOS's own answer (a sharded store) stands
    assert sys_db.asked == [] and sys_db.claims[-1]["is_latest_version"] is False
    claim(sys_db, version="v1")
    claim(sys_db, version="v2")  # another version's answer is not reused
    assert sys_db.asked == ["v1", "v2"]
    claim(sys_db, queue="another")  # other queues are DBOS's alone
    assert "is_latest_version" not in sys_db.claims[-1] and sys_db.asked == ["v1", "v2"]


def test_with_nothing_waiting_dbos_claims_nothing(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty queue (the look for a waiting workflow finds none) saves DBOS's claim, a
    transaction on every poll; other queues and a sharded store are DBOS's alone."""
    monkeypatch.setattr(PromptClaims, "_any_waiting", lambda self: False)
    sys_db = SysDb()
    PromptClaims(Dbos(sys_db))
    claim(sys_db)
    assert sys_db.claims == []
    claim(sys_db, queue="another")
    sys_db.sharded = True
    claim(sys_db)
    assert [c["queue"] for c in sys_db.claims] == ["another", SESSIONS_QUEUE]
