"""What the session loop needs from a durable engine; runtime/engine/ provides it on DBOS."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

# What a session's workflow returns when its generation continues in a new workflow, and
# when an execution was taken over (the session itself runs on elsewhere): the engine
# follows both to the session's real end.
ROLLED_OVER = "rolled_over"
SUPERSEDED = "superseded"


class Durable(Protocol):
    """Durable primitives available inside a session workflow.

    A generation's start, LLM turns and tool calls do not go through `step`: they journal
    themselves in the catalog under idempotent keys (the generation's number, `turn:N`,
    `tool:N:ID`; see turn.llm_turn), and that entry is their record. Recording them here
    as well would write each twice. Everything else whose result steers the workflow's
    path (drains, waits, children, the clock) is a step here.
    """

    # The format of steps this workflow was started in (engine/workflow.py's
    # WORKFLOW_FORMAT): code whose steps changed takes the old path for an older format.
    format: int

    async def step(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` once; after a crash its recorded result is returned instead.

        An async `fn` runs on the loop; a plain one (database work) in a worker thread.
        """
        ...

    async def replaying(self) -> bool:
        """True while this execution retraces an earlier run of the workflow (after a crash
        or a takeover): that run recorded engine steps past this point. Work that journals
        itself outside the engine's steps asks this to answer as the earlier run did."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep durably: the deadline is recorded and kept across restarts."""
        ...

    async def recv(self, topic: str, timeout_s: float) -> Any:
        """Receive the next message on a topic, or None after the timeout."""
        ...

    async def recv_until(self, topic: str, deadline: float) -> Any:
        """recv until a wall-clock deadline (a journaled one): the timeout is measured from
        when the engine first records the wait, so a wait replayed after a crash still
        ends at the deadline, and measuring it costs no step."""
        ...

    async def now(self) -> float:
        """The wall clock, recorded so a replay sees the same value."""
        ...

    async def start_child(self, session_id: str) -> None:
        """Start another session's workflow (idempotent by session id)."""
        ...

    async def send(self, session_id: str, message: Any, topic: str) -> None:
        """Send a durable message to another session."""
        ...

    async def restart_as_new(self, session_id: str, generation: int) -> None:
        """Continue this session (now in `generation`) in a fresh workflow (bounded step
        logs for long sessions)."""
        ...


# One generation of a session, run on the engine's durable primitives: (session id,
# generation, primitives) -> {status, reason}. The session loop is one; the engine runs
# whichever its host gives it.
SessionRunner = Callable[[str, int, Durable], Awaitable[dict[str, Any]]]
