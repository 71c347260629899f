"""Artifacts end to end: the model writes, lists and reads them; names that could leave the
artifact folder are refused; the size cap holds; `swarmdeck artifacts get` fetches one."""

from __future__ import annotations

import asyncio
from pathlib import Path

from swarmdeck import Swarm
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import run_cli, write_provider
from tests.integration.test_sessions_support import (
    Agent,
    Scripted,
    call,
    calls,
    text,
    tool_results,
)

REPORT = "# Report\nall good\n"


async def test_artifacts_through_the_model_and_the_cli(
    sd_home: Path, fake_llm, workdir: Path
) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    cap = 1_000_000  # Settings.artifact_max_bytes

    def read_back(req: FakeRequest) -> Reply:
        link = tool_results(req)[0].removeprefix("stored ")
        return calls(
            call("list_artifacts"),
            call("read_artifact", name="report.md"),
            call("read_artifact", name=link),
            call("read_artifact", name="../../credentials/openai"),
            call("read_artifact", name="missing.md"),
        )

    script = Scripted(
        {
            "archivist": Agent(
                [
                    calls(
                        call("write_artifact", name="report.md", content=REPORT),
                        call("write_artifact", name="../escape.txt", content="x"),
                        call("write_artifact", name="sub/dir.txt", content="x"),
                        call("write_artifact", name="big.bin", content="x" * (cap + 1)),
                    ),
                    read_back,
                    text("filed"),
                ]
            )
        }
    )
    fake_llm.set_script(script)
    async with Swarm() as swarm:
        session = await swarm.start("archivist", "fake", workdir=workdir)
        assert (await session.result(timeout=30)).status == "completed"
        catalog = swarm.host.catalog
    sid = session.id
    link = f"artifact://{sid}/report.md"
    results = [e.payload for e in catalog.events(sid, kinds=["tool_result"])]
    outcomes = [(r["name"], r["is_error"], r["content"]) for r in results]
    assert outcomes[0] == ("write_artifact", False, f"stored {link}")
    for name, bad in ((outcomes[1], "'../escape.txt'"), (outcomes[2], "'sub/dir.txt'")):
        assert name[1] is True and name[2].startswith(
            f"permission denied: invalid artifact name {bad}"
        )
    assert outcomes[3] == (
        "write_artifact",
        True,
        f"error: artifact too large: {cap + 1} bytes (limit {cap})",
    )
    assert outcomes[4] == ("list_artifacts", False, f"{link}  {len(REPORT)} bytes")
    assert outcomes[5] == ("read_artifact", False, REPORT)
    assert outcomes[6] == ("read_artifact", False, REPORT)
    assert outcomes[7][1] is True and outcomes[7][2].startswith(
        "permission denied: invalid artifact name"
    )
    assert outcomes[8] == ("read_artifact", True, f"error: no artifact artifact://{sid}/missing.md")
    # Only the one artifact exists, inside its session's folder.
    stored = sorted(
        p.relative_to(sd_home) for p in (sd_home / "artifacts").rglob("*") if p.is_file()
    )
    assert stored == [Path("artifacts") / sid / "report.md"]
    assert not (sd_home / "escape.txt").exists()

    got, traversal = await asyncio.gather(
        asyncio.to_thread(run_cli, sd_home, "artifacts", "get", link),
        asyncio.to_thread(run_cli, sd_home, "artifacts", "get", f"artifact://{sid}/../x"),
    )
    assert got.code == 0, got.stderr
    assert got.stdout == REPORT
    assert traversal.code != 0
    assert "invalid artifact name" in traversal.stderr
