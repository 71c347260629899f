"""Keep the real stdout for the contract's JSON lines; anything else on fd 1 goes to stderr."""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import IO, Self


class ContractStdout:
    """While open, fd 1 and sys.stdout point at stderr; `emit` writes to the real stdout.

    A library that prints (or a C extension writing to fd 1) would otherwise break the
    planner's parser; redirecting the descriptor catches both.
    """

    def __init__(self) -> None:
        self._saved_fd: int | None = None
        self._out: IO[str] | None = None
        self._old_stdout: IO[str] | None = None
        self.emitted = 0

    def __enter__(self) -> Self:
        sys.stdout.flush()
        self._saved_fd = os.dup(1)
        self._out = os.fdopen(os.dup(self._saved_fd), "w", encoding="utf-8")
        os.dup2(2, 1)
        self._old_stdout = sys.stdout
        sys.stdout = sys.stderr
        return self

    def emit(self, line: str) -> None:
        """Write one line to the real stdout, now."""
        assert self._out is not None, "ContractStdout is not open"
        self._out.write(line.rstrip("\n") + "\n")
        self._out.flush()
        self.emitted += 1

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        sys.stderr.flush()
        if self._old_stdout is not None:
            sys.stdout = self._old_stdout
        if self._saved_fd is not None:
            os.dup2(self._saved_fd, 1)
            os.close(self._saved_fd)
        if self._out is not None:
            self._out.close()
