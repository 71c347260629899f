"""A session with its workspace in the store (`SWARMDECK_WORKSPACE=store`): captured at
submission, run in the host's own copy, snapshotted after every step that may change
files, and pulled back with `sessions pull`; real CLI processes, the fake LLM over HTTP,
real git, SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

from swarmdeck.catalog.catalog import Catalog
from swarmdeck.config import load_settings
from tests.conftest import Store, run_cli, write_provider

WRITE_THEN_REMOVE = {
    "scenarios": [
        {
            "turns": [
                {
                    "text": "Writing.",
                    "tool_calls": [
                        {"name": "write_file", "arguments": {"path": "out.txt", "content": "42\n"}}
                    ],
                },
                {
                    "text": "Reading.",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "out.txt"}}],
                },
                {
                    "text": "Removing.",
                    "tool_calls": [{"name": "shell", "arguments": {"argv": ["rm", "README.md"]}}],
                },
                {"text": "Done."},
            ]
        }
    ]
}


def _run(sd_home: Path, workdir: Path, *extra: str, **env: str):
    return run_cli(
        sd_home,
        "run",
        "write out.txt and remove the readme",
        "--model",
        "fake:scripted",
        "--workdir",
        str(workdir),
        "--mode",
        "agent",
        "--no-sandbox",
        *extra,
        **env,
    )


def _session_id(sd_home: Path) -> str:
    rows = json.loads(run_cli(sd_home, "sessions", "ls", "--json").stdout)
    assert len(rows) == 1
    return rows[0]["id"]


def test_a_store_session_works_on_a_copy_and_is_pulled_back(
    store: Store, sd_home: Path, workdir: Path, tmp_path: Path, fake_llm
) -> None:
    fake_llm.set_script(WRITE_THEN_REMOVE)
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    (workdir / ".gitignore").write_text("*.log\n")
    (workdir / "debug.log").write_text("not for the store\n")
    res = _run(sd_home, workdir, SWARMDECK_WORKSPACE="store")
    assert res.code == 0, res.stderr
    assert res.stdout.strip() == "Done."
    # The session ran in this host's copy: the submitted directory is as it was.
    assert not (workdir / "out.txt").exists() and (workdir / "README.md").is_file()
    sid = _session_id(sd_home)
    # Its copy on this host went with its end; the store keeps the files.
    assert not (sd_home / "workspaces" / "trees" / sid).exists()
    assert (sd_home / "workspaces" / "objects.git").is_dir()

    catalog = Catalog.open(load_settings().store_url)
    refs = catalog.refs_of(sid)
    # The submission, then the write and the shell command (the read sent nothing).
    assert [key for key, _ in refs] == ["submitted", "tool:0:call_0_0", "tool:2:call_2_0"]
    assert len({commit for _, commit in refs}) == 3

    out = tmp_path / "pulled"
    pulled = run_cli(sd_home, "sessions", "pull", sid[:8], str(out))
    assert pulled.code == 0, pulled.stderr
    assert (out / "out.txt").read_text() == "42\n"
    assert not (out / "README.md").exists()
    assert (out / "app.py").read_text() == (workdir / "app.py").read_text()
    assert not (out / "debug.log").exists()

    again = run_cli(sd_home, "sessions", "pull", sid, str(out))
    assert again.code == 2
    assert again.stderr.count("\n") == 1 and "not empty" in again.stderr

    assert run_cli(sd_home, "sessions", "rm", sid).code == 0
    assert catalog.refs_of(sid) == []  # its workspace's refs went with it


def test_a_shared_session_cannot_be_pulled(
    sd_home: Path, workdir: Path, fake_llm, tmp_path: Path
) -> None:
    fake_llm.set_script(WRITE_THEN_REMOVE)
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    res = _run(sd_home, workdir)
    assert res.code == 0, res.stderr
    assert (workdir / "out.txt").read_text() == "42\n"  # shared: in place, as before
    pulled = run_cli(sd_home, "sessions", "pull", _session_id(sd_home), str(tmp_path / "x"))
    assert pulled.code == 2
    assert "keeps no workspace in the store" in pulled.stderr
    assert pulled.stderr.count("\n") == 1


def test_an_unknown_workspace_mode_is_refused(sd_home: Path, workdir: Path, fake_llm) -> None:
    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    res = _run(sd_home, workdir, SWARMDECK_WORKSPACE="nfs")
    assert res.code == 2
    assert "unknown workspace mode 'nfs'" in res.stderr
    assert fake_llm.requests == []


async def test_a_sub_agent_of_a_store_session_works_on_a_copy_of_its_parents_files(
    sd_home: Path, workdir: Path, fake_llm
) -> None:
    from swarmdeck import AgentSpec, Swarm

    write_provider(sd_home, "fake", fake_llm.openai_base_url)
    spawn = {"name": "spawn_agent", "arguments": {"task": "child: write", "title": "c"}}
    parent_write = {"path": "parent.txt", "content": "from the parent\n"}
    child_write = {"path": "child.txt", "content": "from the child\n"}
    fake_llm.set_script(
        {
            "scenarios": [
                {
                    "match": "child: write",
                    "turns": [
                        {"tool_calls": [{"name": "write_file", "arguments": child_write}]},
                        {"text": "child done"},
                    ],
                },
                {
                    "match": "parent: delegate",
                    "turns": [
                        {"tool_calls": [{"name": "write_file", "arguments": parent_write}]},
                        {"tool_calls": [spawn]},
                        {"tool_calls": [{"name": "wait_for_agents", "arguments": {}}]},
                        {"text": "parent done"},
                    ],
                },
            ]
        }
    )
    async with Swarm() as swarm:
        spec = AgentSpec("fake", options={"workspace": "store"})
        session = await swarm.start("parent: delegate", spec, workdir=workdir)
        assert (await session.result(timeout=30)).status == "completed"
        catalog = swarm.host.catalog
        [child] = catalog.list_sessions(parent_id=session.id)
    assert child.status == "completed" and child.options["workspace"]["id"] == child.id
    # Neither wrote to the submitted directory.
    assert sorted(p.name for p in workdir.iterdir()) == ["README.md", "app.py"]
    out = workdir.parent / "child-pulled"
    res = run_cli(sd_home, "sessions", "pull", child.id, str(out))
    assert res.code == 0, res.stderr
    # The child started from the parent's files as they were when it was spawned.
    assert (out / "parent.txt").read_text() == "from the parent\n"
    assert (out / "child.txt").read_text() == "from the child\n"
