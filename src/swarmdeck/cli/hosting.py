"""The Host every command that runs sessions uses: one place that knows all result schemas
and every kind of session (a swarm's coordinator, an external runner's session)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swarmdeck.runtime.host import Host


def session_host(role: str = "local", serve_queue: bool = False) -> Host:
    """A Host that can run any session, whoever started it: a worker or `sessions resume` may
    take over a dispatched session, and must validate its result against the mode's schema;
    it may take over a swarm, and must run its coordinator."""
    from swarmdeck.dispatch.schemas import VALIDATORS
    from swarmdeck.runners.driver import register as register_runners
    from swarmdeck.runtime.host import Host
    from swarmdeck.swarm.launch import register

    host = Host(role=role, serve_queue=serve_queue)
    host.services.result_validators.update(VALIDATORS)
    register(host.services)
    register_runners(host.services)
    return host
