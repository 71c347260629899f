"""DBOS's warnings for what swarmdeck does on purpose (a process stopping its sessions, a
paused worker's execution taken over) are dropped; its other warnings still reach every
handler."""

from __future__ import annotations

import logging

from swarmdeck.runtime.engine import quiet_expected_warnings


class Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def test_expected_warnings_are_dropped_and_other_warnings_kept() -> None:
    dbos_log = logging.getLogger("dbos")
    keep = Keep()
    dbos_log.addHandler(keep)
    try:
        quiet_expected_warnings()
        quiet_expected_warnings()  # once is enough; twice changes nothing
        dbos_log.warning("Asyncio task cancelled for workflow or step <function run_async>")
        dbos_log.warning("Workflow abc is no longer owned by this execution")
        dbos_log.warning("Workflow %s failed to recover", "abc")
    finally:
        dbos_log.removeHandler(keep)
    assert keep.seen == ["Workflow abc failed to recover"]
    assert len([f for f in dbos_log.filters if type(f).__name__ == "_ExpectedWarnings"]) == 1
