"""What the exchanges and the HTTP front ends need of the server they answer for.

FakeLLM (fake_llm.py) is the one implementation; the front ends and exchange.py see it
through this protocol, so they sit below the public face rather than import it back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from swarmdeck.testing.prompt_cache import PromptCache
    from swarmdeck.testing.reply import FaultCounter, Reply
    from swarmdeck.testing.request import FakeRequest
    from swarmdeck.testing.script import OverflowStyle


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it (header names lower-cased; body None if not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    timestamp: float


class Backend(Protocol):
    """The server's settings, script, counters and open connections."""

    latency: float
    cache: PromptCache
    _faults: FaultCounter

    @property
    def quirks(self) -> frozenset[str]:
        """Vendor quirks the server enforces."""
        ...

    def window(self) -> tuple[int | None, OverflowStyle]:
        """The context window in force and how a prompt over it is refused."""
        ...

    def _reply(self, request: FakeRequest) -> Reply: ...

    def _record(self, request: RecordedRequest) -> None: ...

    def _sleep(self, seconds: float) -> bool: ...

    def _enter(self) -> None: ...

    def _leave(self) -> None: ...

    def _next_request_id(self) -> str: ...

    def _track(self, conn: Any) -> None: ...

    def _untrack(self, conn: Any) -> None: ...
