"""A run's progress: human lines on stderr and in run.log, raw events in events.jsonl."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import IO

from rich.console import Console

from swarmdeck.catalog.records import EventRecord
from swarmdeck.views.progress import ProgressPrinter, clock

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _private_open(path: Path) -> IO[str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    return path.open("a", encoding="utf-8")


class RunLog:
    """Writes every event three ways; keeps library warnings in the log too."""

    def __init__(self, log_path: Path, events_path: Path, *, to_stderr: bool = True) -> None:
        self.log_path = log_path
        self.events_path = events_path
        self._log = _private_open(log_path)
        self._events = _private_open(events_path)
        self._file_printer = ProgressPrinter(
            Console(file=self._log, no_color=True, width=160, highlight=False, soft_wrap=True)
        )
        self._stderr_printer = ProgressPrinter() if to_stderr else None
        self._handler = logging.StreamHandler(self._log)
        self._handler.setLevel(logging.WARNING)
        self._handler.setFormatter(logging.Formatter(LOG_FORMAT))
        logging.getLogger().addHandler(self._handler)

    def event(self, ev: EventRecord) -> None:
        """One transcript event."""
        record = {"id": ev.id, "seq": ev.seq, "kind": ev.kind, "ts": ev.ts, "payload": ev.payload}
        self._events.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._events.flush()
        self._file_printer(ev)
        self._log.flush()
        if self._stderr_printer is not None:
            self._stderr_printer(ev)

    def note(self, text: str) -> None:
        """A line of our own (start, heartbeat, end), in the log and on stderr, timed."""
        self._log.write(f"{clock()} {text}\n")
        self._log.flush()
        if self._stderr_printer is not None:
            self._stderr_printer.note(text)

    def tail(self, limit: int = 4096) -> str:
        """The end of the log so far."""
        self._log.flush()
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(0, 2)
                size = handle.tell()
                handle.seek(max(0, size - limit))
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Stop writing; detach the logging handler."""
        logging.getLogger().removeHandler(self._handler)
        for handle in (self._log, self._events):
            if not handle.closed:
                handle.close()
