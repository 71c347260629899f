"""What a workspace store keeps (the catalog's sd_ws_* tables are one), and which of its
packs a commit needs.

A pack holds the objects one capture added: those reachable from its commit and from none
of its bases (commits the store held already). So a commit needs its own pack and,
recursively, the packs of its bases, down to commits the local cache already has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from swarmdeck.errors import NotFoundError


class PackStore(Protocol):
    """Packs by content id, the commit each brings, and each workspace's refs."""

    def known_commits(self, commit_ids: list[str]) -> set[str]:
        """Which of these commits the store holds."""
        ...

    def put_pack(self, pack_id: str, data: bytes, commit_id: str, bases: list[str]) -> bool:
        """Store a pack and the commit it brings (False: the commit was there)."""
        ...

    def pack_of(self, commit_id: str) -> tuple[str, list[str]] | None:
        """The pack that brought a commit and the bases it left out."""
        ...

    def pack_data(self, pack_id: str) -> bytes | None:
        """A pack's bytes."""
        ...

    def put_ref(self, workspace_id: str, step_key: str, commit_id: str) -> str:
        """Record a step's commit; returns the one recorded first."""
        ...

    def ref(self, workspace_id: str, step_key: str) -> str | None:
        """The commit recorded for a step."""
        ...

    def latest_ref(self, workspace_id: str) -> str | None:
        """The workspace's newest commit."""
        ...


def packs_needed(store: PackStore, commit_id: str, have: Callable[[str], bool]) -> list[str]:
    """The pack ids to fetch for `commit_id`, bases first, skipping what `have` (a commit
    the local cache holds whole) says is there already."""
    order: list[str] = []
    seen: set[str] = set()
    # Depth-first with an explicit stack: a long history must not hit the recursion limit.
    stack: list[tuple[str, bool]] = [(commit_id, False)]
    while stack:
        commit, expanded = stack.pop()
        if expanded:
            entry = store.pack_of(commit)
            assert entry is not None  # checked on the way down
            if entry[0] not in order:
                order.append(entry[0])
            continue
        if commit in seen or have(commit):
            continue
        seen.add(commit)
        entry = store.pack_of(commit)
        if entry is None:
            raise NotFoundError(
                f"the store holds no snapshot {commit[:12]}",
                "the workspace was removed from the store; capture the directory again",
            )
        stack.append((commit, True))
        stack.extend((base, False) for base in entry[1])
    return order
