"""Helpers of the plugin and system-agent tests: the reference folders written to disk,
plugin folders made on the fly, seeded session trees, a scripted mgmt model.

Holds no tests itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from swarmdeck.catalog import schema
from swarmdeck.catalog.catalog import Catalog
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import run_cli, write_provider
from tests.integration.test_sessions_support import call, calls, text

REFERENCE = Path("/work/shared/reference/pilotswarm-sdk-0.1.3-plugins.txt")
EXTRACT = REFERENCE.with_name("extract.py")
LISTED_RE = re.compile(r"^- (\S+) ", re.M)


def reference_plugins(dest: Path) -> Path:
    """The PilotSwarm reference plugins written to `dest` as they shipped; `dest/plugins`."""
    subprocess.run(
        [sys.executable, str(EXTRACT), str(REFERENCE), str(dest)],
        check=True,
        capture_output=True,
    )
    return dest / "plugins"


def write(path: Path, body: str) -> Path:
    """Write a file, making its folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    return path


def agent_file(folder: Path, name: str, front: str, body: str = "Do the work.") -> Path:
    """An agents/NAME.agent.md with this front matter (YAML text) and body."""
    return write(folder / "agents" / f"{name}.agent.md", f"---\n{front.strip()}\n---\n{body}\n")


def fast_sweeper(folder: Path, seconds: float = 0.3) -> Path:
    """A plugin overriding the packaged sweeper with a fast cron (same id, same tools)."""
    packaged = Path(__file__).resolve().parents[2] / "src/swarmdeck/plugins/packaged/mgmt"
    text = (packaged / "agents/sweeper.agent.md").read_text()
    agent_file_text = text.replace("  seconds: 60\n", f"  seconds: {seconds}\n")
    assert agent_file_text != text
    return write(folder / "agents" / "sweeper.agent.md", agent_file_text).parents[1]


def last_user_text(req: FakeRequest) -> str:
    """The last user message of the request."""
    users = [str(m.get("content") or "") for m in req.messages if m.get("role") == "user"]
    return users[-1] if users else ""


def last_is_tool_result(req: FakeRequest) -> bool:
    """True when the request ends with a tool result (the model continues a turn)."""
    return bool(req.messages) and req.messages[-1].get("role") == "tool"


@dataclass
class MgmtScript:
    """The scripted model of the three packaged system agents."""

    asked: dict[str, int]

    def __call__(self, req: FakeRequest) -> Reply:
        for needle, name in (
            ("stand by", "operator"),
            ("something to clean", "sweeper"),
            ("needs attention", "resourcemgr"),
        ):
            if needle in req.task:
                self.asked[name] = self.asked.get(name, 0) + 1
                return getattr(self, name)(req)
        return text(f"(unscripted: {req.task[:40]})")

    def operator(self, req: FakeRequest) -> Reply:
        return text("operator ready")

    def resourcemgr(self, req: FakeRequest) -> Reply:
        return text("resource manager ready" if req.turn == 0 else "noted")

    def sweeper(self, req: FakeRequest) -> Reply:
        if req.turn == 0:
            return text("sweeper ready")
        if last_is_tool_result(req):
            return text("swept")
        said = last_user_text(req)
        if "may be removed" in said:
            ids = LISTED_RE.findall(said.split("may be removed", 1)[1])
            return calls(*(call("cleanup_session", session_id=i, reason="stale") for i in ids))
        return text(f"sweeper here; you said: {said}")


def seed(
    catalog: Catalog,
    sid: str,
    *,
    status: str,
    ago: float,
    parent: str | None = None,
    root: str | None = None,
    options: dict[str, Any] | None = None,
    run_dir: str = "",
) -> None:
    """A session row with a status, ended (or last changed) `ago` seconds before now."""
    catalog.create_session(
        session_id=sid,
        model="fake",
        mode="agent",
        workdir="/tmp",
        run_dir=run_dir or "/tmp",
        task=f"seeded {sid}",
        parent_id=parent,
        root_id=root,
        options=options,
    )
    with catalog.engine.begin() as conn:
        conn.execute(
            schema.sessions.update()
            .where(schema.sessions.c.id == sid)
            .values(status=status, updated_at=time.time() - ago)
        )


def session_ids(catalog: Catalog) -> set[str]:
    """Every session id of the store."""
    with catalog.engine.connect() as conn:
        return {r[0] for r in conn.execute(sa.select(schema.sessions.c.id))}


def enable_system_agents(sd_home: Path, fake_llm: Any) -> tuple[MgmtScript, str]:
    """The packaged system agents enabled on the fake model (`system start`), answered by
    a fresh MgmtScript; returns it and what the command printed."""
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    script = MgmtScript({})
    fake_llm.set_script(script)
    res = run_cli(sd_home, "system", "start", "--model", "fake")
    assert res.code == 0, res.stderr
    return script, res.stdout
