"""A worker's heap freezer: what it freezes is out of the collector's walks, what was
garbage before a freeze is collected first, and a cycle a freeze kept is given back at the
next thaw."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from swarmdeck.runtime.heap import THAW_EVERY, HeapFreezer


class Node:
    """A cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.self = self


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of this process's tests run on an ordinary heap


def test_garbage_is_collected_before_the_freeze() -> None:
    garbage = Node()
    gone = weakref.ref(garbage)
    del garbage
    before = gc.get_freeze_count()
    HeapFreezer().refreeze()
    assert gone() is None
    # This module's functions, among all start-up made, are out of every collection.
    assert gc.get_freeze_count() > before + 10_000


def test_a_cycle_kept_by_a_freeze_is_given_back_at_the_next_thaw() -> None:
    heap = HeapFreezer()
    heap.refreeze()  # the first freeze thaws, collects and freezes
    alive = Node()  # in flight at the next freeze
    kept = weakref.ref(alive)
    heap.refreeze()
    del alive
    gc.collect()
    assert kept() is not None  # frozen: no collection looks at it
    while heap.freezes % THAW_EVERY != 0:
        heap.refreeze()  # no thaw
        assert kept() is not None
    heap.refreeze()  # the thaw
    assert kept() is None
