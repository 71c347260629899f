"""What every runner adapter provides, and what its event stream is parsed into."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

Wire = Literal["openai", "anthropic"]
# The built-in loop's name as a runner: the default.
BUILT_IN = "swarmdeck"
# A runner's session: its kind (runners/driver.py drives it) and the option naming the
# runner. Here, not in the driver: a dispatch on the fleet path names them before it hands
# the session over, and must not import the runtime to do so.
RUNNER_KIND = "runner"
RUNNER_OPTION = "runner"


@dataclass(frozen=True)
class Endpoint:
    """Where a runner's model calls go: the run's key proxy on loopback, with a per-run
    token in place of the provider's key (key_proxy.py)."""

    base_url: str
    token: str
    model: str


@dataclass(frozen=True)
class Access:
    """What the run's mode allows: the runner's own permissions say the same as the
    sandbox that wraps it."""

    mode: str
    writes: bool


@dataclass
class Step:
    """One model response of the runner: its text, its tool calls and its usage."""

    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    cost_usd: float | None = None


@dataclass(frozen=True)
class ToolDone:
    """A tool call the runner made and what it returned."""

    call_id: str
    name: str
    content: str
    is_error: bool


@dataclass(frozen=True)
class RunnerSession:
    """The runner's own session id, which its resume takes."""

    value: str


Item = Step | ToolDone | RunnerSession


class Parser(Protocol):
    """Turns a runner's JSON event lines into steps, tool results and its session id."""

    def feed(self, event: dict[str, Any]) -> list[Item]:
        """The items one event line completes (often none)."""
        ...

    def finish(self) -> list[Item]:
        """What is left when the stream ends (a step cut off by a timeout, say)."""
        ...


class Adapter(Protocol):
    """One external runner: its wire, its per-run config files, its command line."""

    name: str
    wire: Wire
    # The provider kinds it can be pointed at (a kind's server speaks the runner's wire).
    kinds: tuple[str, ...]

    def prepare(self, home: Path, endpoint: Endpoint, access: Access) -> None:
        """Write the runner's private config (0600) under the run's own home."""
        ...

    def argv(self, binary: Path, prompt: str, resume: str | None, access: Access) -> list[str]:
        """The runner's command line: a new run, or a resume of its session `resume`."""
        ...

    def parser(self) -> Parser:
        """A fresh parser for one run's event stream."""
        ...


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (0600), in a dir only its owner may enter."""
    import os

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def usage_counts(
    uncached_input: int, output: int, cache_read: int = 0, cache_write: int = 0, reasoning: int = 0
) -> dict[str, int]:
    """Token counts as swarmdeck's ledger keeps them (input without the cached part)."""
    return {
        "input": max(0, uncached_input),
        "output": max(0, output),
        "reasoning": max(0, reasoning),
        "cache_read": max(0, cache_read),
        "cache_write": max(0, cache_write),
    }
