"""Which sandbox confines tools, and the line that warns when none does.

Plain Python, apart from the sandbox's machinery (tools/sandbox.py): the fleet path of
`dispatch` says which sandbox a worker's tools run in without importing any of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

SandboxKind = Literal["bwrap", "landlock", "none"]
INSTALL_HINT = "install bubblewrap: `apt install bubblewrap`, or `make demo` as root"
OPTED_OUT_REASON = "turned off by the user (--no-sandbox or sandbox: off)"
# What opting out of the sandbox lifts, and what stays (tests/integration/test_opt_out.py
# checks each fact against a real command).
OPT_OUT_LIFTS = "shell commands may read and write outside the workdir"
OPT_OUT_KEEPS = (
    "they still get no network unless the provider profile grants it, no secret in their "
    "environment, no view of swarmdeck's home (its credential store) or of ~/.ssh and the "
    "other credential dirs, and nothing they start outlives the call"
)


@dataclass(frozen=True)
class SandboxInfo:
    """The sandbox shell tools run in here, and why it is that one."""

    kind: SandboxKind
    reason: str
    version: str | None = None

    @property
    def available(self) -> bool:
        """True when some sandbox confines tools (bubblewrap or Landlock)."""
        return self.kind != "none"

    @property
    def opted_out(self) -> bool:
        """True when none confines them because the user said so."""
        return self.kind == "none" and self.reason == OPTED_OUT_REASON


def sandbox_warning(read_only: bool, reason: str, opted_out: bool) -> str:
    """The one line `run` and `dispatch` print when no sandbox confines the tools."""
    head = f"warning: no sandbox ({reason}):"
    if read_only:
        return f"{head} this read-only run has no shell tool, only the file tools; {INSTALL_HINT}"
    if opted_out:
        return f"{head} {OPT_OUT_LIFTS}, as you asked; {OPT_OUT_KEEPS}"
    return f"{head} the shell tool will refuse to run; {INSTALL_HINT}, or pass --no-sandbox"
