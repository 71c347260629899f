"""A runner's session is taken from the fleet only by a worker that has that runner
(issue 33): the claim filters on the session's stored options, on both stores."""

from __future__ import annotations

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.runners.base import RUNNER_KIND, RUNNER_OPTION


def _pending(catalog: Catalog, sid: str, options: dict[str, object]) -> None:
    catalog.create_session(
        session_id=sid, model="p:m", mode="explore", workdir="/tmp", run_dir="/tmp",
        task="t", options=options,
    )  # fmt: skip


def test_only_a_worker_with_the_runner_takes_its_session(store) -> None:  # type: ignore[no-untyped-def]
    catalog = Catalog.open(store.url)
    _pending(catalog, "s-plain", {"max_turns": 5})
    _pending(catalog, "s-oc", {"kind": RUNNER_KIND, RUNNER_OPTION: "opencode"})
    _pending(catalog, "s-cc", {"kind": RUNNER_KIND, RUNNER_OPTION: "claude"})
    # A worker with no runner takes the plain session only.
    assert [sid for sid, _ in catalog.take_handover("w-bare", 10)] == ["s-plain"]
    # One with Claude Code takes its session, and never OpenCode's.
    assert [sid for sid, _ in catalog.take_handover("w-claude", 10, ["claude"])] == ["s-cc"]
    assert catalog.take_handover("w-claude", 10, ["claude"]) == []
    assert [sid for sid, _ in catalog.take_handover("w-oc", 10, ["opencode"])] == ["s-oc"]
