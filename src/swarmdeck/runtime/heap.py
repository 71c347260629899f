"""A worker's heap, kept out of the cyclic garbage collector's walks.

A full collection walks every object the collector tracks. A worker keeps what start-up
made (modules, classes, the SDKs: about 190,000 objects) and what its waiting sessions hold
(their coroutines, frames and records) alive for as long as it runs, and under a message
load (turns made and dropped) a full collection came every few seconds: each walked them
all again, 0.4-0.9 s of stalled loops at 2,500 sessions a worker. Freezing what is alive
just after a collection leaves the collector only what was made since.

A freeze also keeps what was alive then and becomes cyclic garbage later (a turn in flight,
its exception and traceback): every THAW_EVERY freezes the heap is thawed and collected
whole, which gives that back.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass

# How often a worker freezes what its sessions made since the last freeze.
REFREEZE_SECONDS = 30.0
# Every this many freezes, the first included, a whole collection before the freeze.
THAW_EVERY = 10


@dataclass
class HeapFreezer:
    """Collects, then freezes what is left; now and then thaws everything first."""

    freezes: int = 0

    def refreeze(self) -> None:
        """Collect what is not frozen (all of it, every THAW_EVERY), then freeze the rest."""
        if self.freezes % THAW_EVERY == 0:
            gc.unfreeze()
        self.freezes += 1
        gc.collect()
        gc.freeze()

    async def run(self) -> None:
        """The duty: one refreeze (on the loop, as any collection would stall it)."""
        self.refreeze()
