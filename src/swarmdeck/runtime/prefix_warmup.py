"""A family's first request on its shared prefix goes alone; its siblings' wait for it.

A vendor's prompt cache keeps a prefix once the answer to a prompt that holds it begins:
siblings sent at the same moment (a parent's twenty sub-agents) each pay for all of it,
and none is served from the cache. So, in each process, the first of a family's sessions
to ask on a prefix (the family's, and the instructions that open the first message: one
mode's members, a parent's sub-agents) sends its request; the first requests of the others
on the same prefix wait until that answer begins (its first chunk), ends or fails, or
WAIT_S has passed since the first was sent, then find the prefix cached. The bound counts
from the first request, not from each waiter: a first that stalls holds the others back
once, not again at each retry (a member retried after its timeout would spend its every
attempt waiting). A prefix that began an answer here within
KEEP_S (the vendors keep one five minutes or more) is not waited for again. Workers on
other machines do not wait for each other: each may pay for the prefix once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from swarmdeck.models.types import ToolSpec

# How long a sibling waits for the first answer on its prefix to begin. A vendor has read
# (and cached) a prompt of a few thousand tokens well within this; an answer slower to
# begin (a queue, a model that thinks before it streams) holds its siblings back no longer.
WAIT_S = 3.0
# How long a prefix that began an answer counts as cached.
KEEP_S = 240.0


@dataclass
class _Prefix:
    """One prefix in this process: the loop its first request runs on, when that was sent,
    and when its answer began (None while it is awaited)."""

    loop: asyncio.AbstractEventLoop
    sent: float
    began: asyncio.Event = field(default_factory=asyncio.Event)
    at: float | None = None


_prefixes: dict[str, _Prefix] = {}


def prefix_key(model: str, system: str, specs: Sequence[ToolSpec], preamble: str = "") -> str:
    """What identifies a shared prefix: the model, the system text, the tools, and the
    instructions that open the first message (runtime/family.py)."""
    tools = [(s.name, s.description, s.parameters) for s in specs]
    text = json.dumps([model, system, tools, preamble], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@contextlib.asynccontextmanager
async def first_on_prefix(key: str) -> AsyncIterator[Callable[[], None]]:
    """Wait while another request on this prefix is the first; yields the function to call
    once this request's answer begins (called on leaving, too)."""
    loop = asyncio.get_running_loop()
    now = time.monotonic()
    _forget_old(now)
    known = _prefixes.get(key)
    if known is not None and known.loop is loop:
        left = known.sent + WAIT_S - now
        if known.at is None and left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(known.began.wait(), left)
        yield lambda: None
        return
    mine = _Prefix(loop, now)
    _prefixes[key] = mine

    def began() -> None:
        if mine.at is None:
            mine.at = time.monotonic()
            mine.began.set()

    try:
        yield began
    finally:
        began()


def _forget_old(now: float) -> None:
    for key in [k for k, p in _prefixes.items() if p.at is not None and now - p.at > KEEP_S]:
        del _prefixes[key]
