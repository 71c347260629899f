"""Helpers of the swarm tests: a git project, scripted coordinators and members, and the
swarm's journal read back. Holds no tests itself."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.dispatch.modes import RESULT_EXAMPLES
from swarmdeck.testing.script import FakeRequest, Reply
from tests.conftest import CliResult, run_cli
from tests.integration.test_sessions_support import Agent, call, calls, text

RESULTS = {mode: example for mode, (example, _rule) in RESULT_EXAMPLES.items()}


def git_project(root: Path) -> Path:
    """A small committed git repository."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text("# project\nhello\n")
    (root / "app.py").write_text("def main():\n    return 42\n")
    for args in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init"],
    ):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def plan_of(*members: dict[str, Any]) -> dict[str, Any]:
    """submit_plan's arguments."""
    return {"members": list(members)}


def coordinator(*plans: dict[str, Any], merged: str = "MERGED RESULT") -> Agent:
    """A coordinator that submits these plans (one a turn), then merges in text."""
    return Agent([*(calls(call("submit_plan", **p)) for p in plans), text(merged)])


def member(mode: str, *before: Reply, result: dict[str, Any] | None = None) -> Agent:
    """A member: a list_dir, any other turns, then its mode's example result."""
    submit = calls(call("submit_result", result=result or RESULTS[mode]))
    return Agent([calls(call("list_dir")), *before, submit])


def run_swarm(home: Path, *args: str, timeout: float = 180, **env: str) -> CliResult:
    """`swarmdeck swarm ARGS` as a real process."""
    return run_cli(home, "swarm", *args, timeout=timeout, **env)


def swarm_json(
    home: Path, task: str, workdir: Path, *extra: str, code: int = 0, timeout: float = 180
) -> tuple[CliResult, dict[str, Any]]:
    """`swarmdeck swarm TASK -C WORKDIR -m fake --json EXTRA...`: the run, which must exit
    with `code`, and its swarmdeck.swarm object."""
    res = run_swarm(home, task, "-C", str(workdir), "-m", "fake", "--json", *extra, timeout=timeout)
    assert res.code == code, res.stderr[-3000:]
    return res, report_of(res)


def bare_session(catalog: Catalog, sid: str, **options: Any) -> None:
    """A session row with these options (`parent` and `root` are its parent and root)."""
    catalog.create_session(
        session_id=sid,
        model="fake:m",
        mode="explore",
        workdir=".",
        run_dir=".",
        task=sid,
        parent_id=options.pop("parent", None),
        root_id=options.pop("root", None),
        options=options,
    )


def report_of(res: CliResult) -> dict[str, Any]:
    """The swarmdeck.swarm object of a `--json` run (its last stdout line)."""
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON on stdout (exit {res.code}); stderr:\n{res.stderr[-3000:]}"
    doc = json.loads(lines[-1])
    assert doc["type"] == "swarmdeck.swarm"
    return doc


def journal(catalog: Catalog, coordinator_id: str) -> dict[str, dict[str, Any]]:
    """The coordinator's swarm entries by key."""
    return {e.key: e.payload for e in catalog.events(coordinator_id, kinds=["swarm"])}


def event_ts(catalog: Catalog, session_id: str, key: str) -> float:
    """When an entry was stored."""
    event = catalog.event_by_key(session_id, key)
    assert event is not None, f"{session_id} has no {key}"
    return event.ts


def tool_texts(req: FakeRequest) -> list[str]:
    """The tool messages of a request, in order."""
    return [str(m.get("content") or "") for m in req.messages if m.get("role") == "tool"]


def user_texts(req: FakeRequest) -> list[str]:
    """The user messages of a request, in order."""
    return [str(m.get("content") or "") for m in req.messages if m.get("role") == "user"]


def prompt_of(req: Any) -> str:
    """What a request told the model before its history: the system prompt (the swarm's
    shared prefix) and the first message, which a member's own prompt opens."""
    first_user = next((m for m in req.messages if m.get("role") == "user"), {})
    return f"{req.messages[0]['content']}\n\n{first_user.get('content', '')}"
