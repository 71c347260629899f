"""Shortest unique id prefixes, as git abbreviates commits: printed whole, never cut."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from swarmdeck.catalog.records import SYSTEM_SESSION_PREFIX

# Shorter prefixes are unique today and ambiguous after the next few sessions.
MIN_PREFIX = 6


def _common(a: str, b: str) -> int:
    """The length of the common head of two strings (a binary search over slices: a few
    comparisons in C rather than one Python step per character)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def shortest_prefixes(ids: Iterable[str], min_len: int = MIN_PREFIX) -> dict[str, str]:
    """For each id, the shortest prefix (at least `min_len`) that names it alone among
    `ids`, and that `Catalog.resolve_session_id` resolves to it: never a prefix that is also
    a system agent's short name (`sweeper` names `sys-sweeper`). A system agent's session
    keeps its whole id."""
    ordered = sorted(set(ids))
    # resolve_session_id tries `sys-<prefix>` before prefixes: such a prefix means another.
    system_names = {
        i.removeprefix(SYSTEM_SESSION_PREFIX)
        for i in ordered
        if i.startswith(SYSTEM_SESSION_PREFIX)
    }
    # Each neighbour pair once: the head id n shares with id n+1.
    shared = [_common(a, b) for a, b in itertools.pairwise(ordered)] + [0]
    found: dict[str, str] = {}
    for n, sid in enumerate(ordered):
        if sid.startswith(SYSTEM_SESSION_PREFIX):
            found[sid] = sid
            continue
        before = shared[n - 1] if n else 0
        after = shared[n]
        size = max(min_len, before + 1, after + 1)
        while size < len(sid) and sid[:size] in system_names:
            size += 1
        found[sid] = sid[:size]
    return found
