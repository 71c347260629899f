"""The Host every command that runs sessions uses: one place that knows all result schemas."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swarmdeck.runtime.host import Host


def session_host(role: str = "local", serve_queue: bool = False) -> Host:
    """A Host that can run any session, whoever started it: a worker or `sessions resume` may
    take over a dispatched session, and must validate its result against the mode's schema."""
    from swarmdeck.dispatch.schemas import VALIDATORS
    from swarmdeck.runtime.host import Host

    host = Host(role=role, serve_queue=serve_queue)
    host.services.result_validators.update(VALIDATORS)
    return host
