"""50 sessions under a 429 storm: no work lost, no retry storm, the concurrency cap held."""

from __future__ import annotations

import asyncio
from pathlib import Path

from swarmdeck import Swarm
from tests.conftest import write_provider


async def test_fifty_sessions_under_a_429_storm(sd_home: Path, fake_llm, workdir: Path) -> None:
    # Every conversation's first request is refused with Retry-After: 1; the retry succeeds.
    fake_llm.set_script(
        {
            "scenarios": [
                {
                    "turns": [
                        {
                            "text": "done {{task}}",
                            "fault": {"status": 429, "retry_after": 1, "times": 1},
                        }
                    ]
                }
            ]
        }
    )
    fake_llm.latency = 0.02
    write_provider(sd_home, "fake", fake_llm.openai_base_url, concurrency=4)
    swarm = Swarm()
    try:
        sessions = await asyncio.gather(
            *(swarm.start(f"job {i}", "fake", workdir=workdir) for i in range(50))
        )
        results = await asyncio.gather(*(s.result(timeout=120) for s in sessions))
    finally:
        await swarm.aclose()
    assert [r.status for r in results] == ["completed"] * 50
    assert sorted(r.text for r in results) == sorted(f"done job {i}" for i in range(50))
    # One refused and one accepted request per session, and nothing more: the shared
    # cooldown keeps waiting callers from hammering the provider while it refuses.
    assert len(fake_llm.requests) == 100
    assert fake_llm.max_concurrent <= 4
